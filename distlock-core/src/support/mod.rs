//! Pieces every backend needs in the same form: settings from URL parameters,
//! credentials kept out of text, and the errors drivers raise.

use std::time::Duration;

mod probe;
pub(crate) mod random;
mod url;

pub use self::probe::{probe_endpoint, Probe};
pub use self::url::{encode, is_secret_name, ConnectionUrl, Endpoint, Options};

use crate::error::{Error, ErrorKind, Result};

/// A configuration error of `backend`.
pub fn config_error(backend: &'static str, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message.into()).with_backend(backend)
}

/// The URL parameter `name` as a positive number of milliseconds.
pub fn positive_millis(backend: &'static str, name: &str, value: &str) -> Result<Duration> {
    value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| {
            config_error(
                backend,
                format!("{name} must be a positive number of milliseconds, not {value:?}"),
            )
        })
}

/// A key prefix: at most 64 bytes, no control characters.
pub fn key_prefix(backend: &'static str, value: &str) -> Result<String> {
    if value.len() > 64 || value.chars().any(char::is_control) {
        return Err(config_error(
            backend,
            "prefix must be at most 64 bytes without control characters",
        ));
    }
    Ok(value.to_owned())
}

/// `text` with every occurrence of `secret` replaced by `***`.
pub fn scrub(text: String, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() && text.contains(s) => text.replace(s, "***"),
        _ => text,
    }
}

/// `error`'s text followed by each of its sources' that says something new, joined
/// by `: `, so that "transport error" comes with its cause.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// The first error of type `T` in `error`'s chain: `error` itself, its sources, and
/// the error each wrapper hides from `source` (an I/O error's, and a shared
/// `Arc<dyn Error>`'s, as redis keeps its causes), so that a driver's cause is found
/// by its type.
pub fn find_cause<'a, T: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        let hidden: Option<&'a (dyn std::error::Error + 'static)> =
            match e.downcast_ref::<std::io::Error>() {
                Some(io) => io.get_ref().map(|inner| inner as _),
                None => e.downcast_ref::<Shared>().map(|shared| &**shared as _),
            };
        if let Some(found) = hidden.and_then(find_cause::<T>) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// Whether `error`'s chain holds rustls's refusal of a certificate: the server's,
/// refused here (an unknown issuer, a wrong name, expired), or this client's,
/// refused by the server's alert. A setting to fix, not a server to wait for.
/// Without the `tls` feature there is no TLS, and the answer is `false`.
pub fn is_certificate_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "tls")]
    {
        use rustls::{AlertDescription as Alert, Error as Tls};
        matches!(
            find_cause::<Tls>(error),
            Some(
                Tls::InvalidCertificate(_)
                    | Tls::NoCertificatesPresented
                    | Tls::AlertReceived(
                        Alert::BadCertificate
                            | Alert::UnknownCA
                            | Alert::CertificateExpired
                            | Alert::CertificateUnknown
                            | Alert::CertificateRevoked
                            | Alert::UnsupportedCertificate
                            | Alert::CertificateRequired
                    )
            )
        )
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = error;
        false
    }
}

/// An error of `kind` from `backend`'s driver: a one-line summary of the kind, the
/// driver's text (scrub it first) on the same line (a text of several lines is joined
/// with "; "), and that text kept whole as the source. Decide `kind` from the driver's
/// codes and types (a refused certificate is [`ErrorKind::Configuration`]: see
/// [`is_certificate_refused`]).
pub fn driver_error(kind: ErrorKind, backend: &'static str, detail: String) -> Error {
    let summary = match kind {
        ErrorKind::Authentication => "the server refused the credentials",
        ErrorKind::Configuration => "the settings do not fit the server",
        ErrorKind::Unavailable => "the server could not be reached or did not answer",
        _ => "the server answered with an error",
    };
    Error::new(kind, format!("{summary}: {}", one_line(&detail)))
        .with_backend(backend)
        .with_source_text(detail)
}

/// The error of a connection to `endpoint` that was answered in another protocol than
/// `protocol` (say "Redis" or "PostgreSQL"): the URL names the port of another
/// service, an HTTP server's say. [`ErrorKind::Configuration`], since no retry
/// changes what listens there; the message names the endpoint and ends with the
/// driver's `detail` (scrub it first) on the same line, kept whole as the source.
pub fn wrong_protocol(
    backend: &'static str,
    endpoint: &str,
    protocol: &str,
    detail: String,
) -> Error {
    Error::new(
        ErrorKind::Configuration,
        format!(
            "{endpoint} does not speak the {protocol} protocol: its answer could not be read \
             as one (is that the port of another service?): {}",
            one_line(&detail)
        ),
    )
    .with_backend(backend)
    .with_source_text(detail)
}

/// `text` on one line: its lines, trimmed, joined with "; ".
fn one_line(text: &str) -> String {
    if !text.contains('\n') {
        return text.to_owned();
    }
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod cause_tests {
    use std::sync::Arc;

    use crate::ErrorKind;

    use super::find_cause;

    #[derive(Debug, thiserror::Error)]
    #[error("the cause")]
    struct Cause;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_driver_error_of_several_lines_is_shown_on_one_and_kept_whole() {
        let text = "Parse error at 1\nUnexpected `84`\n  Unexpected `72`\n".to_owned();
        let err = super::driver_error(ErrorKind::Backend, "redis", text.clone());
        assert_eq!(
            err.to_string(),
            "backend error [redis]: the server answered with an error: \
             Parse error at 1; Unexpected `84`; Unexpected `72`"
        );
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some(text.as_str()));
        let wrong = super::wrong_protocol("redis", "127.0.0.1:80", "Redis", text);
        assert_eq!(wrong.kind(), ErrorKind::Configuration);
        assert!(!wrong.to_string().contains('\n'), "{wrong}");
    }

    #[test]
    fn a_cause_is_found_inside_io_errors_and_shared_wrappers() {
        let io = std::io::Error::other(Cause);
        assert!(find_cause::<Cause>(&io).is_some(), "inside an I/O error");
        let outer = Outer(std::io::Error::other(Cause));
        assert!(
            find_cause::<Cause>(&outer).is_some(),
            "a source's I/O error"
        );
        let shared: Arc<dyn std::error::Error + Send + Sync> =
            Arc::new(std::io::Error::other(Cause));
        assert!(find_cause::<Cause>(&shared).is_some(), "a shared wrapper");
        let plain = std::io::Error::other("only text: the cause");
        assert!(find_cause::<Cause>(&plain).is_none(), "text is not a type");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn only_a_certificate_refusal_counts_as_one() {
        use super::is_certificate_refused;
        use rustls::{AlertDescription, CertificateError, Error as Tls};
        let refused =
            std::io::Error::other(Tls::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(is_certificate_refused(&refused));
        let alert = std::io::Error::other(Tls::AlertReceived(AlertDescription::UnknownCA));
        assert!(is_certificate_refused(&alert));
        let other = std::io::Error::other(Tls::AlertReceived(AlertDescription::HandshakeFailure));
        assert!(!is_certificate_refused(&other));
        let text = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        assert!(!is_certificate_refused(&text), "decided by type, not text");
    }
}
