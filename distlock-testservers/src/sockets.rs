//! Killing a server's client connections from this machine's side, for servers that
//! have no command for it (etcd): `ss -K` (socket destroy) aborts this machine's TCP
//! connections to the server's port, as a network fault would. It needs
//! `CAP_NET_ADMIN` and a kernel that supports it; whether it works is tried once, on a
//! connection of the harness's own, and where it does not the case that needs it is
//! reported as not run.

use std::time::Duration;

use distlock_core::BoxError;

/// `ss` arguments that select this machine's TCP connections to 127.0.0.1:`port`.
fn to_port(port: u16) -> [String; 6] {
    [
        "-t".into(),
        "dst".into(),
        "127.0.0.1".into(),
        "dport".into(),
        "=".into(),
        format!(":{port}"),
    ]
}

/// The local ends (`address:port`, with the socket's inode) of this machine's
/// established TCP connections to 127.0.0.1:`port`.
async fn local_connections(port: u16) -> Result<std::collections::BTreeSet<String>, BoxError> {
    let listed = tokio::process::Command::new("ss")
        .args(["-H", "-e", "state", "established"])
        .args(to_port(port))
        .output()
        .await?;
    if !listed.status.success() {
        return Err(format!(
            "ss could not list the connections to port {port}: {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        )
        .into());
    }
    // With a state filter the columns are: Recv-Q, Send-Q, local end, peer end.
    Ok(String::from_utf8_lossy(&listed.stdout)
        .lines()
        // The socket's inode with its address: a reconnect that reuses the local port
        // at once is a new socket, not one the kill left open.
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(2)?;
            let inode = fields.find(|f| f.starts_with("ino:"))?;
            Some(format!("{local} {inode}"))
        })
        .collect())
}

/// Aborts every TCP connection from this machine to 127.0.0.1:`port` with `ss -K`
/// (socket destroy: the kernel must support it and the process needs
/// `CAP_NET_ADMIN`); their owners' next read or write fails. An error when any of the
/// connections open before is still open after; clients that connect again at once
/// make new connections, which are not counted.
pub(crate) async fn kill_local_connections(port: u16) -> Result<usize, BoxError> {
    let before = local_connections(port).await?;
    let killed = tokio::process::Command::new("ss")
        .arg("-K")
        .args(to_port(port))
        .output()
        .await?;
    let after = local_connections(port).await?;
    let left = before.intersection(&after).count();
    if left > 0 {
        return Err(format!(
            "ss -K left {left} connection(s) to port {port} open: {}",
            String::from_utf8_lossy(&killed.stderr).trim()
        )
        .into());
    }
    Ok(before.len())
}

/// Whether [`kill_local_connections`] works on this machine: tried once, on a
/// connection of its own.
pub(crate) fn can_be_killed() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        let attempt = || -> std::io::Result<bool> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let port = listener.local_addr()?.port();
            let mut client = std::net::TcpStream::connect(("127.0.0.1", port))?;
            let (_server, _) = listener.accept()?;
            std::process::Command::new("ss")
                .arg("-K")
                .args(to_port(port))
                .output()?;
            // A destroyed socket fails at once; a live one would wait for data.
            client.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut buf = [0u8; 1];
            Ok(match std::io::Read::read(&mut client, &mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            })
        };
        attempt().unwrap_or(false)
    })
}
