//! A member of a replicated set cut off from its peers, both ways, while clients still
//! reach it: the partition that leaves a leader (or a Redis master) in the minority.
//!
//! Each container on a network the harness made has a network namespace of its own.
//! The cut is a `blackhole` route in the isolated member's namespace for each peer's
//! address, and one in each peer's namespace for the member's: neither side's packets
//! reach the other, and neither learns it but by silence (or, for a connection it opens
//! itself, an immediate error). Clients are untouched: they reach each container from
//! this machine, through the network's gateway, which no route names.
//!
//! The routes are added with `nsenter` and `ip` run as root on this machine (the
//! namespaces belong to the containers' processes). A namespace ends with its
//! container's process: a member killed or restarted comes back with no route.

use std::net::IpAddr;

use distlock_core::BoxError;

use crate::handle::ServerHandle;

/// Cuts `member` off from `peers`, both ways. A peer that is not running (killed,
/// stopped) has no namespace to change and is left out; it comes back with none of the
/// routes, so a member isolated meanwhile is reachable from it: the cut is for the
/// peers running when it is made.
pub(crate) async fn isolate(
    member: &ServerHandle,
    peers: &[&ServerHandle],
) -> Result<(), BoxError> {
    routes(member, peers, Route::Add).await
}

/// Ends [`isolate`]: removes the routes it added, where they are still there.
pub(crate) async fn rejoin(member: &ServerHandle, peers: &[&ServerHandle]) -> Result<(), BoxError> {
    routes(member, peers, Route::Delete).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Add,
    Delete,
}

async fn routes(member: &ServerHandle, peers: &[&ServerHandle], op: Route) -> Result<(), BoxError> {
    let Some(member_pid) = member.pid().await? else {
        // A member not running: its routes went with its namespace.
        return match op {
            Route::Delete => Ok(()),
            Route::Add => Err("the member to isolate is not running".into()),
        };
    };
    let member_ip = ip_of(member.current_ip().await?)?;
    for peer in peers {
        // A peer not running has no namespace, and no address to route.
        let Some(pid) = peer.pid().await? else {
            continue;
        };
        let peer_ip = ip_of(peer.current_ip().await?)?;
        route(member_pid, peer_ip, op).await?;
        route(pid, member_ip, op).await?;
    }
    Ok(())
}

fn ip_of(ip: Option<IpAddr>) -> Result<IpAddr, BoxError> {
    ip.ok_or_else(|| "a member has no address on its network".into())
}

/// Adds or deletes a blackhole route to `to` in the network namespace of process
/// `pid`. Deleting a route that is not there is not an error.
async fn route(pid: u32, to: IpAddr, op: Route) -> Result<(), BoxError> {
    let prefix = match to {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    let verb = match op {
        Route::Add => "replace",
        Route::Delete => "del",
    };
    let output = tokio::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "ip", "route", verb])
        .args(["blackhole", &format!("{to}/{prefix}")])
        .output()
        .await
        .map_err(|e| format!("nsenter could not be run (it needs util-linux and root): {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    // `ip route del` of a route that is gone: "RTNETLINK answers: No such process".
    if op == Route::Delete && said.contains("No such process") {
        return Ok(());
    }
    Err(format!(
        "`nsenter -t {pid} -n ip route {verb} blackhole {to}/{prefix}` failed ({}): {}",
        output.status,
        said.trim()
    )
    .into())
}
