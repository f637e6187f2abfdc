//! Pieces every backend needs in the same form: settings from URL parameters,
//! credentials kept out of text, and the errors drivers raise.

use std::time::Duration;

mod url;

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

/// Whether a driver's error text says the server's certificate was refused (an
/// unknown issuer, a wrong name, an expired or malformed certificate): a setting to
/// fix, not a server to wait for.
pub fn is_certificate_refusal(detail: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "invalid peer certificate",
        "UnknownIssuer",
        "certificate verify failed",
        "InvalidCertificate",
        "NotValidForName",
        "BadCertificate",
    ];
    SIGNS.iter().any(|sign| detail.contains(sign))
}

/// An error of `kind` from `backend`'s driver: a one-line summary of the kind, the
/// driver's text (scrub it first), and that text kept as the source. One whose text
/// says the server's certificate was refused is an [`ErrorKind::Configuration`] error
/// whatever `kind` the driver's error had.
pub fn driver_error(kind: ErrorKind, backend: &'static str, detail: String) -> Error {
    let kind = if is_certificate_refusal(&detail) {
        ErrorKind::Configuration
    } else {
        kind
    };
    let summary = match kind {
        ErrorKind::Authentication => "the server refused the credentials",
        ErrorKind::Configuration => "the settings do not fit the server",
        ErrorKind::Unavailable => "the server could not be reached or did not answer",
        _ => "the server answered with an error",
    };
    Error::new(kind, format!("{summary}: {detail}"))
        .with_backend(backend)
        .with_source_text(detail)
}
