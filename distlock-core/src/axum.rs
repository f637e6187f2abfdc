//! With the `axum` feature: an [`Error`] is an axum response, with the status every
//! service answers it with ([`Error::http_status`]) and, where the client knew when a
//! retry may succeed, `Retry-After` ([`Error::retry_after`]).

use axum_core::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

use crate::error::Error;

impl IntoResponse for Error {
    /// The status of [`Error::http_status`], `Retry-After` in whole seconds (rounded
    /// up) where [`Error::retry_after`] is known, and the kind's name as a plain-text
    /// body: the message, which names keys and backends, stays in the service's logs.
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, self.kind().as_str()).into_response();
        if let Some(seconds) = self.retry_after_seconds() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
