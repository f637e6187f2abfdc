//! What a service meets when it adopts a backend, checked beside the suite: an
//! unreachable endpoint named with the setting that ran out, a password holding the
//! characters a URL gives meaning to, and a wrong password refused as such.
//!
//! Each check takes the backend's own way to connect (a closure from a URL, or from
//! `host:port`), runs it, and returns what it found wrong as text, so that a third
//! party runs them on its backend in a few lines:
//!
//! ```no_run
//! # async fn demo() -> Result<(), String> {
//! use std::time::Duration;
//! use distlock_conformance::adoption;
//! use distlock_core::MemoryBackend;
//!
//! // The backend's URL with a secret in it, pointed at `addr`.
//! adoption::unreachable_endpoint_is_named("connect_timeout_ms=300", Duration::from_secs(3), |addr| async move {
//!     let _url = format!("mine://user:{}@{addr}?connect_timeout_ms=300", adoption::SECRET);
//!     // MyBackend::connect(&_url).await
//!     Ok::<_, distlock_core::Error>(MemoryBackend::new())
//! })
//! .await
//! # }
//! ```

use std::future::Future;
use std::time::{Duration, Instant};

use distlock_core::backend::LockBackendExt;
use distlock_core::{ErrorKind, LockBackend};

/// A password with every character a URL gives meaning to that a password may hold:
/// `+` (a space in form decoding), `&` (an option's end), `%` (an escape) and `@`
/// (the end of the credentials).
pub const PASSWORD: &str = "p+w&d%@x";

/// [`PASSWORD`], percent-encoded.
pub const PASSWORD_ENCODED: &str = "p%2Bw%26d%25%40x";

/// A password one character away from [`PASSWORD`].
pub const WRONG_PASSWORD: &str = "p+w&d%@y";

/// How soon a refused connection must be reported: no time-out runs, so at once,
/// with room for a loaded machine.
const REFUSED_WITHIN: Duration = Duration::from_secs(1);

/// A secret that a URL given to [`unreachable_endpoint_is_named`] may carry: no error
/// may show it.
pub const SECRET: &str = "s3cret";

/// Checks a connection to an endpoint that takes connections and never answers, then
/// to one that refuses them. `connect` gets `127.0.0.1:<port>` and connects the
/// backend there, with its time-outs set to what `setting` names (say
/// `"connect_timeout_ms=300"`); its URL may carry [`SECRET`].
///
/// Each attempt must fail within `within` as
/// [`ErrorKind::Unavailable`], with a message on one line that names the endpoint; the
/// silent one must also name `setting`, as written, and the refused one must not: a
/// refused connection is not a time-out, and naming the setting would send the reader
/// to raise it. The refused one must also say it was refused, within a second (there
/// is no time-out to wait for). Neither message nor `Debug` may show [`SECRET`].
pub async fn unreachable_endpoint_is_named<B, F, Fut>(
    setting: &str,
    within: Duration,
    connect: F,
) -> Result<(), String>
where
    B: LockBackend,
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let (silent, addr) = loopback_listener()?;
    let silent_err = refused(&connect, &addr, within, "a silent endpoint").await?;
    let text = silent_err.to_string();
    if !text.contains(setting) {
        return Err(format!(
            "a silent endpoint's error does not name the setting {setting}: {text}"
        ));
    }
    // Now nothing listens there: the connection is refused.
    drop(silent);
    closed_port(&connect, &addr, within.min(REFUSED_WITHIN), Some(setting)).await?;
    Ok(())
}

/// Checks a connection to a port where nothing listens, made with the backend's
/// default time-outs: `connect` gets `127.0.0.1:<port>` and connects the backend there
/// (its URL may carry [`SECRET`]). It must fail as [`ErrorKind::Unavailable`] within a
/// second, whatever its time-outs (none runs: the refusal comes at once), with a
/// message on one line that names the endpoint and says the connection was refused.
/// Returns the error, for checks of the backend's own.
pub async fn refused_connection_is_reported_at_once<B, F, Fut>(
    connect: F,
) -> Result<distlock_core::Error, String>
where
    B: LockBackend,
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let (closed, addr) = loopback_listener()?;
    drop(closed);
    closed_port(&connect, &addr, REFUSED_WITHIN, None).await
}

/// What [`wrong_protocol_endpoint_is_reported_at_once`]'s endpoint answers: an HTTP
/// server's refusal of a request it cannot read.
pub const HTTP_REFUSAL: &str =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// How long [`wrong_protocol_endpoint_is_reported_at_once`]'s endpoint waits for the
/// client's first bytes before it answers anyway, as an HTTP server whose header
/// time-out ran out would (so a protocol where the server speaks first, as MySQL's,
/// hears it too).
const HTTP_HEADER_WAIT: Duration = Duration::from_millis(200);

/// Checks a connection to an endpoint that speaks another protocol: an HTTP server on
/// loopback, which answers [`HTTP_REFUSAL`] to the client's first bytes (or after
/// 200 ms of silence, to a client that waits for the server to speak first) and then
/// closes the connection. `connect` gets its `127.0.0.1:<port>` and connects the
/// backend there with its default time-outs (its URL may carry [`SECRET`]).
///
/// It must fail as [`ErrorKind::Configuration`] (the URL names the wrong server, and no
/// retry will change that) within a second, with a message on one line that names the
/// endpoint and says it speaks another protocol (the word "protocol"), and that shows
/// neither [`SECRET`] nor a time-out the reader could raise in vain. Returns the error,
/// for checks of the backend's own.
pub async fn wrong_protocol_endpoint_is_reported_at_once<B, F, Fut>(
    connect: F,
) -> Result<distlock_core::Error, String>
where
    B: LockBackend,
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let (server, addr) = http_endpoint()?;
    let what = "an HTTP endpoint";
    let outcome = failed(
        &connect,
        &addr,
        REFUSED_WITHIN,
        what,
        ErrorKind::Configuration,
    )
    .await;
    drop(server);
    let err = outcome?;
    let text = err.to_string();
    if !text.to_lowercase().contains("protocol") {
        return Err(format!(
            "{what}'s error does not say it speaks another protocol: {text}"
        ));
    }
    if text.contains("timeout") || text.contains("time-out") || text.contains("timed out") {
        return Err(format!("{what}'s error speaks of a time-out: {text}"));
    }
    Ok(err)
}

/// The HTTP server [`wrong_protocol_endpoint_is_reported_at_once`] connects to, for a
/// check of one's own (a command line's exit code, say): on a free loopback port, it
/// answers [`HTTP_REFUSAL`] to each connection's first bytes, or after 200 ms of
/// silence, then closes it. Returns the server, which stops when dropped, and its
/// `127.0.0.1:<port>`. Needs a tokio runtime.
pub fn http_endpoint() -> Result<(HttpEndpoint, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (listener, addr) = loopback_listener()?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("the listener: {e}"))?;
    let listener =
        tokio::net::TcpListener::from_std(listener).map_err(|e| format!("the listener: {e}"))?;
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                let _ = tokio::time::timeout(HTTP_HEADER_WAIT, stream.read(&mut request)).await;
                let _ = stream.write_all(HTTP_REFUSAL.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok((HttpEndpoint(server), addr))
}

/// The server [`http_endpoint`] started; dropping it stops it.
#[derive(Debug)]
pub struct HttpEndpoint(tokio::task::JoinHandle<()>);

impl Drop for HttpEndpoint {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A listener on a free loopback port, and its `127.0.0.1:<port>`.
fn loopback_listener() -> Result<(std::net::TcpListener, String), String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("the listener's address: {e}"))?
        .to_string();
    Ok((listener, addr))
}

/// A connection to `addr`, where nothing listens: it must fail as [`refused`] checks,
/// within `within`, saying the connection was refused and not naming the time-out
/// `setting` (none ran out).
async fn closed_port<B, F, Fut>(
    connect: &F,
    addr: &str,
    within: Duration,
    setting: Option<&str>,
) -> Result<distlock_core::Error, String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let err = refused(connect, addr, within, "a closed port").await?;
    let text = err.to_string();
    if let Some(setting) = setting.filter(|setting| text.contains(setting)) {
        return Err(format!(
            "a closed port's error names the time-out setting {setting}, as if the server had not answered: {text}"
        ));
    }
    if !text.to_lowercase().contains("refused") {
        return Err(format!(
            "a closed port's error does not say the connection was refused: {text}"
        ));
    }
    Ok(err)
}

/// One connection that must fail, within `within`, as `Unavailable` naming `addr`.
async fn refused<B, F, Fut>(
    connect: &F,
    addr: &str,
    within: Duration,
    what: &str,
) -> Result<distlock_core::Error, String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    failed(connect, addr, within, what, ErrorKind::Unavailable).await
}

/// One connection that must fail, within `within`, as `kind`, with a message on one
/// line that names `addr` and shows no [`SECRET`].
async fn failed<B, F, Fut>(
    connect: &F,
    addr: &str,
    within: Duration,
    what: &str,
    kind: ErrorKind,
) -> Result<distlock_core::Error, String>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let started = Instant::now();
    let err = match tokio::time::timeout(within, connect(addr.to_owned())).await {
        Err(_) => {
            return Err(format!(
                "connecting to {what} did not end within {within:?}"
            ))
        }
        Ok(Ok(_)) => return Err(format!("connecting to {what} ({addr}) succeeded")),
        Ok(Err(e)) => e,
    };
    let took = started.elapsed();
    let text = err.to_string();
    if text.contains('\n') {
        return Err(format!("{what}'s error takes more than one line: {text}"));
    }
    if err.kind() != kind {
        return Err(format!("{what}: {:?}, not {kind:?}: {text}", err.kind()));
    }
    if !text.contains(addr) {
        return Err(format!("{what}'s error does not name {addr}: {text}"));
    }
    shows_no(&err, SECRET, what)?;
    if took > within {
        return Err(format!("{what}: the error took {took:?}, above {within:?}"));
    }
    Ok(err)
}

/// Neither the message nor `Debug` of `err` shows `secret`.
fn shows_no(err: &distlock_core::Error, secret: &str, what: &str) -> Result<(), String> {
    let shown = format!("{err} {err:?}");
    if shown.contains(secret) {
        return Err(format!("{what}: the error shows the password: {shown}"));
    }
    Ok(())
}

/// Checks that [`PASSWORD`] works as the operator wrote it: `url` holds it raw, and the
/// backend `connect` makes from it, and from the same URL with [`PASSWORD_ENCODED`],
/// must each take and release a lock.
///
/// Where the server checks the password at connect, follow with
/// [`wrong_password_is_refused`]. Where it does not (ZooKeeper's digest scheme), a
/// connection proves nothing alone: check what the server made of the password too.
pub async fn reserved_password_connects<B, F, Fut>(url: &str, connect: F) -> Result<(), String>
where
    B: LockBackend,
    F: Fn(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    if !url.contains(PASSWORD) {
        return Err(format!("the URL does not hold the password raw: {url}"));
    }
    for (form, url) in [
        ("raw", url.to_owned()),
        ("percent-encoded", url.replace(PASSWORD, PASSWORD_ENCODED)),
    ] {
        let backend = connect(url)
            .await
            .map_err(|e| format!("the password {form}: connect: {e}"))?;
        let lease = backend
            .acquire_once("adopted", Duration::from_secs(5))
            .await
            .map_err(|e| format!("the password {form}: acquire: {e}"))?
            .ok_or_else(|| format!("the password {form}: the lock was held"))?;
        backend
            .release_lease(&lease)
            .await
            .map_err(|e| format!("the password {form}: release: {e}"))?;
    }
    Ok(())
}

/// Checks that the backend `connect` makes from `url` with [`WRONG_PASSWORD`] in place of
/// [`PASSWORD`] is refused at connect as [`ErrorKind::Authentication`], with the
/// driver's own code reachable ([`Error::code`](distlock_core::Error::code)), and
/// without the password in the message or `Debug`. Gives back the error, for the
/// backend's own checks of its code.
pub async fn wrong_password_is_refused<B, F, Fut>(
    url: &str,
    connect: F,
) -> Result<distlock_core::Error, String>
where
    B: LockBackend,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    if !url.contains(PASSWORD) {
        return Err(format!("the URL does not hold the password raw: {url}"));
    }
    let err = match connect(url.replace(PASSWORD, WRONG_PASSWORD)).await {
        Ok(_) => return Err("a wrong password connected".to_owned()),
        Err(e) => e,
    };
    if err.kind() != ErrorKind::Authentication {
        return Err(format!(
            "a wrong password: {:?}, not Authentication: {err}",
            err.kind()
        ));
    }
    if err.code().is_none() {
        return Err(format!("a wrong password: no driver code: {err:?}"));
    }
    // The part both passwords share, which is the secret either way.
    shows_no(&err, &PASSWORD[..5], "a wrong password")?;
    Ok(err)
}

/// A URL without its password, to a server that wants one, is refused as
/// [`ErrorKind::Authentication`]: at connect, or, where connecting sends nothing the
/// server checks, at the first lock. `url` holds [`PASSWORD`] raw, as
/// `user:PASSWORD@` or `:PASSWORD@`.
pub async fn missing_password_is_refused<B, F, Fut>(
    url: &str,
    connect: F,
) -> Result<distlock_core::Error, String>
where
    B: LockBackend + 'static,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = distlock_core::Result<B>>,
{
    let without = url.replacen(&format!(":{PASSWORD}@"), "@", 1);
    if without == url {
        return Err(format!("the URL does not hold the password raw: {url}"));
    }
    let err = match connect(without).await {
        Ok(backend) => {
            let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
            match client.try_lock("adoption/no-password").await {
                Ok(_) => return Err("a lock was taken without the password".to_owned()),
                Err(e) => e,
            }
        }
        Err(e) => e,
    };
    if err.kind() != ErrorKind::Authentication {
        return Err(format!(
            "no password: {:?}, not Authentication: {err}",
            err.kind()
        ));
    }
    shows_no(&err, &PASSWORD[..5], "no password")?;
    Ok(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::{Error, MemoryBackend};

    /// A backend "connect" that fails as `make` says, given the address.
    fn failing(
        make: impl Fn(&str) -> Error,
    ) -> impl Fn(String) -> std::future::Ready<distlock_core::Result<MemoryBackend>> {
        move |addr| std::future::ready(Err(make(&addr)))
    }

    fn check(
        connect: impl Fn(String) -> std::future::Ready<distlock_core::Result<MemoryBackend>>,
    ) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(unreachable_endpoint_is_named(
            "connect_timeout_ms=300",
            Duration::from_secs(1),
            connect,
        ))
    }

    #[test]
    fn errors_that_name_the_endpoint_and_the_setting_only_for_silence_pass() {
        // The first attempt is the silent endpoint's, the second the closed port's.
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let good = failing(move |addr| {
            let text = match attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
                0 => format!("{addr}: no answer within 300ms (connect_timeout_ms=300)"),
                _ => format!("{addr}: connection refused"),
            };
            Error::new(ErrorKind::Unavailable, text)
        });
        assert_eq!(check(good), Ok(()));
    }

    #[test]
    fn each_failing_point_of_an_unreachable_endpoint_is_caught() {
        type MakeError = Box<dyn Fn(&str) -> Error>;
        let cases: Vec<(&str, MakeError)> = vec![
            (
                "not Unavailable",
                Box::new(|addr| {
                    Error::new(ErrorKind::Timeout, format!("{addr} connect_timeout_ms=300"))
                }),
            ),
            (
                "does not name",
                Box::new(|_| Error::new(ErrorKind::Unavailable, "connect_timeout_ms=300")),
            ),
            (
                "does not name the setting",
                Box::new(|addr| Error::new(ErrorKind::Unavailable, format!("{addr} timed out"))),
            ),
            (
                "names the time-out setting",
                Box::new(|addr| {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!("{addr}: no connection within 300ms (connect_timeout_ms=300)"),
                    )
                }),
            ),
            (
                "shows the password",
                Box::new(|addr| {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!("redis://:{SECRET}@{addr} connect_timeout_ms=300"),
                    )
                }),
            ),
        ];
        for (expected, make) in cases {
            let found = check(failing(make)).expect_err(expected);
            assert!(found.contains(expected), "{expected}: {found}");
        }
        let connected = check(|_| std::future::ready(Ok(MemoryBackend::new())))
            .expect_err("a connection that succeeds");
        assert!(connected.contains("succeeded"), "{connected}");
    }

    #[test]
    fn each_failing_point_of_a_refused_connection_is_caught() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let run = |text: &'static str, after: Duration| {
            rt.block_on(refused_connection_is_reported_at_once(
                move |addr| async move {
                    tokio::time::sleep(after).await;
                    Err::<MemoryBackend, _>(Error::new(
                        ErrorKind::Unavailable,
                        text.replace("ADDR", &addr),
                    ))
                },
            ))
            .map(|_| ())
        };
        assert_eq!(run("ADDR: connection refused", Duration::ZERO), Ok(()));
        for (text, after, expected) in [
            (
                "ADDR: connection refused",
                Duration::from_millis(1500),
                "did not end within 1s",
            ),
            (
                "ADDR: no answer",
                Duration::ZERO,
                "does not say the connection was refused",
            ),
            (
                "ADDR: connection\nrefused",
                Duration::ZERO,
                "more than one line",
            ),
            ("connection refused", Duration::ZERO, "does not name"),
        ] {
            let found = run(text, after).expect_err(expected);
            assert!(found.contains(expected), "{expected}: {found}");
        }
    }

    #[test]
    fn each_failing_point_of_a_wrong_protocol_endpoint_is_caught() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        // The connect reads the endpoint's answer first, as a backend would.
        let run = |kind: ErrorKind, text: &'static str| {
            rt.block_on(wrong_protocol_endpoint_is_reported_at_once(
                move |addr| async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut stream = tokio::net::TcpStream::connect(&addr)
                        .await
                        .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
                    stream.write_all(b"hello").await.ok();
                    let mut answer = String::new();
                    stream.read_to_string(&mut answer).await.ok();
                    assert_eq!(answer, HTTP_REFUSAL);
                    Err::<MemoryBackend, _>(Error::new(kind, text.replace("ADDR", &addr)))
                },
            ))
            .map(|_| ())
        };
        let configuration = ErrorKind::Configuration;
        assert_eq!(
            run(configuration, "ADDR does not speak the protocol"),
            Ok(())
        );
        for (kind, text, expected) in [
            (
                ErrorKind::Unavailable,
                "ADDR: protocol error",
                "not Configuration",
            ),
            (configuration, "ADDR: parse error", "another protocol"),
            (configuration, "ADDR: protocol\nerror", "more than one line"),
            (configuration, "protocol error", "does not name"),
            (
                configuration,
                "ADDR: protocol error (connect_timeout_ms)",
                "time-out",
            ),
        ] {
            let found = run(kind, text).expect_err(expected);
            assert!(found.contains(expected), "{expected}: {found}");
        }
    }

    #[test]
    fn the_password_checks_refuse_what_they_cannot_check() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let memory = |_url: String| std::future::ready(Ok(MemoryBackend::new()));
        // A URL without the password proves nothing.
        let r = rt.block_on(reserved_password_connects("mine://u:other@h", memory));
        assert!(r.is_err(), "{r:?}");
        // Both forms reach a backend that locks.
        let url = format!("mine://u:{PASSWORD}@h");
        assert_eq!(
            rt.block_on(reserved_password_connects(&url, memory)),
            Ok(())
        );
        // A wrong password that connects is caught...
        let r = rt.block_on(wrong_password_is_refused(&url, memory));
        assert_eq!(r.err().as_deref(), Some("a wrong password connected"));
        // ...and so is one refused as another kind, or without the driver's code.
        let unavailable = |_url: String| {
            std::future::ready(Err::<MemoryBackend, _>(Error::new(
                ErrorKind::Unavailable,
                "down",
            )))
        };
        assert!(rt
            .block_on(wrong_password_is_refused(&url, unavailable))
            .is_err());
        let no_code = |_url: String| {
            std::future::ready(Err::<MemoryBackend, _>(Error::new(
                ErrorKind::Authentication,
                "refused",
            )))
        };
        let r = rt.block_on(wrong_password_is_refused(&url, no_code));
        assert!(
            r.as_ref().is_err_and(|e| e.contains("no driver code")),
            "{r:?}"
        );
        let coded = |_url: String| {
            std::future::ready(Err::<MemoryBackend, _>(
                Error::new(ErrorKind::Authentication, "refused").with_code("28P01"),
            ))
        };
        let refused = rt.block_on(wrong_password_is_refused(&url, coded));
        assert_eq!(
            refused.map(|e| e.code().map(str::to_owned)),
            Ok(Some("28P01".to_owned()))
        );
    }
}
