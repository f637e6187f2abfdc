//! The operator's commands: `migrate`, `health`, `inspect`, `watch`, `list` and
//! `force-release`, each through a `LockClient` as a service's calls would go.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use distlock::{Error, ErrorKind, KeyState, LockClient, LockInfo, LockKey};
use futures_util::StreamExt as _;

use crate::exit::{self, failed, say};
use crate::signals::Signals;

/// What an operator's command on `memory://` says first: that backend lives in this
/// process alone.
pub(crate) const MEMORY_IS_PER_PROCESS: &str = "note: memory:// is this command's own in-memory backend: it holds only what this process locks, so inspect, watch, list, force-release and observe never see another process's locks or elections";

/// `distlock migrate [--print]`.
pub(crate) async fn migrate(url: &str, print: bool) -> Result<u8, Error> {
    let migration = distlock::descriptors()
        .into_iter()
        .filter(|d| d.serves(url))
        .find_map(|d| d.migration().copied());
    if let Some(migration) = migration {
        if print {
            for statement in migration.statements(url)? {
                println!("{statement};");
            }
        } else {
            println!("{}", migration.run(url).await?);
        }
        return Ok(0);
    }
    let backend = distlock::Connector::new().connect(url).await?;
    if print {
        println!("-- the {} backend keeps no tables", backend.name());
    } else {
        println!(
            "the {} backend keeps no tables: nothing to migrate",
            backend.name()
        );
    }
    Ok(0)
}

/// `distlock health`: connects and makes one round trip within `limit`.
pub(crate) async fn health(url: &str, limit: Duration, json: bool) -> u8 {
    let checked = tokio::time::timeout(limit, async {
        let backend = distlock::Connector::new().connect(url).await?;
        distlock::LockClient::new(backend).health().await
    })
    .await;
    let health = match checked {
        Ok(Ok(health)) => health,
        Ok(Err(e)) => return failed(&e),
        Err(_) => {
            say(format_args!(
                "error: no answer within {} (--timeout)",
                seconds(limit)
            ));
            return exit::UNAVAILABLE;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "backend": health.backend(),
                "ok": true,
                "latency_ms": health.latency().as_secs_f64() * 1e3,
            })
        );
    } else {
        println!(
            "{}: ok, one round trip in {:.2} ms",
            health.backend(),
            health.latency().as_secs_f64() * 1e3
        );
    }
    0
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn held_json(key: &LockKey, info: Option<&LockInfo>) -> serde_json::Value {
    match info {
        Some(info) => {
            let mut held = serde_json::json!({
                "key": key.as_str(),
                "held": true,
                "fence": info.fence.get(),
                "ttl_ms": millis(info.remaining),
            });
            if let Some(holder) = &info.holder {
                held["holder"] = holder.id().into();
                held["payload"] = holder.payload().into();
            }
            if let Some(at) = info.granted_at {
                held["granted_at"] = utc(at).into();
                let ms = at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                held["granted_at_ms"] = millis(ms).into();
            }
            held
        }
        None => serde_json::json!({ "key": key.as_str(), "held": false }),
    }
}

/// Who holds a lock and since when, for a person: `held by api-7:4242 [its payload]
/// since 2026-11-30T02:50:01.123Z (12.3 s ago)`; what the backend does not keep is
/// left out.
fn holder_text(info: &LockInfo) -> String {
    let mut text = String::new();
    if let Some(holder) = &info.holder {
        text.push_str(&format!(" by {}", holder.id()));
        if let Some(payload) = holder.payload() {
            text.push_str(&format!(" [{}]", payload.escape_debug()));
        }
    }
    if let Some(at) = info.granted_at {
        let ago = SystemTime::now().duration_since(at).unwrap_or_default();
        text.push_str(&format!(" since {} ({} ago)", utc(at), seconds(ago)));
    }
    text
}

/// `at` in UTC, as RFC 3339 with milliseconds.
fn utc(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

pub(crate) async fn inspect(client: &LockClient, key: &LockKey, json: bool) -> Result<u8, Error> {
    let info = client.inspect(key.as_str()).await?;
    print_state(key, info.as_ref(), json);
    Ok(0)
}

/// One state of a key as `inspect` and `watch` print it.
fn print_state(key: &LockKey, info: Option<&LockInfo>, json: bool) {
    if json {
        println!("{}", held_json(key, info));
        return;
    }
    match info {
        Some(info) => println!(
            "{key}: held{}, fence {}, {} left",
            holder_text(info),
            info.fence,
            seconds(info.remaining)
        ),
        None => println!("{key}: free"),
    }
}

/// `distlock watch KEY`: prints the key's state, then each change of its holder, one
/// line each, until a signal, or until `count` lines are printed.
pub(crate) async fn watch(
    client: &LockClient,
    key: &LockKey,
    count: Option<usize>,
    json: bool,
) -> Result<u8, Error> {
    let mut states = client.observe(key.as_str())?;
    let mut stops = Signals::new();
    let mut printed = 0;
    while count.is_none_or(|count| printed < count) {
        let state = tokio::select! {
            state = states.next() => state,
            _ = stops.next() => return Ok(0),
        };
        match state {
            Some(Ok(KeyState::Held(info))) => print_state(key, Some(&info), json),
            Some(Ok(_)) => print_state(key, None, json),
            // A retryable error: the observer looks again.
            Some(Err(e)) if e.is_retryable() => {
                say(format_args!("{key}: {e}; looking again"));
                continue;
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
        printed += 1;
    }
    Ok(0)
}

pub(crate) async fn list(
    client: &LockClient,
    prefix: Option<&str>,
    json: bool,
) -> Result<u8, Error> {
    let held = client.list(prefix.unwrap_or("")).await?;
    if json {
        let all: Vec<_> = held.iter().map(|(k, i)| held_json(k, Some(i))).collect();
        println!("{}", serde_json::Value::Array(all));
    } else {
        for (key, info) in &held {
            println!(
                "{key}\tfence {}\t{} left\t{}",
                info.fence,
                seconds(info.remaining),
                holder_text(info).trim_start()
            );
        }
    }
    Ok(0)
}

pub(crate) async fn force_release(
    client: &LockClient,
    key: &LockKey,
    yes: bool,
) -> Result<u8, Error> {
    let backend = client.backend();
    if backend.operator().is_none() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend cannot force a release", backend.name()),
        ));
    }
    if !yes {
        let Some(info) = client.inspect(key.as_str()).await? else {
            say(format_args!("{key} is not held"));
            return Ok(exit::BUSY);
        };
        if !std::io::stdin().is_terminal() {
            say("error: refusing to break a lock without asking: give --yes, or run from a terminal");
            return Ok(exit::USAGE);
        }
        eprint!(
            "distlock: break {key}, held{} with fence {} for {} more? [y/N] ",
            holder_text(&info),
            info.fence,
            seconds(info.remaining)
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let read = tokio::task::spawn_blocking(move || {
            std::io::stdin()
                .lock()
                .read_line(&mut answer)
                .map(|_| answer)
        })
        .await;
        let answer = match read {
            Ok(Ok(answer)) => answer,
            _ => String::new(),
        };
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            say("not broken");
            return Ok(exit::BUSY);
        }
    }
    if client.force_release(key.as_str()).await? {
        say(format_args!("broke {key}"));
        Ok(0)
    } else {
        say(format_args!("{key} is not held"));
        Ok(exit::BUSY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_times_are_written_in_utc() {
        let at = |ms: u64| utc(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_006_401_123), "2026-11-30T02:40:01.123Z");
        assert_eq!(at(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
