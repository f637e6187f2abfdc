//! What answers at an endpoint, asked in a few bytes: for a connection that failed
//! in a way its driver does not explain, to tell a port of another service from a
//! server of the backend's own kind.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What [`probe_endpoint`] found at an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// No connection: refused, unresolved, or not made within the time given.
    NoConnection,
    /// A connection, closed or silent without a byte of answer within the time given.
    NoAnswer,
    /// The first bytes of the answer (at most 64).
    Answered(Vec<u8>),
}

impl Probe {
    /// The answer's first line as text, where it is one (an HTTP server's status
    /// line, say): for an error message.
    pub fn first_line(&self) -> Option<String> {
        let Probe::Answered(bytes) = self else {
            return None;
        };
        let line = bytes.split(|b| *b == b'\r' || *b == b'\n').next()?;
        let text = std::str::from_utf8(line).ok()?;
        let printable = !text.is_empty() && text.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        printable.then(|| text.to_owned())
    }
}

/// Connects to `endpoint` (`host:port`) over plain TCP, sends `hello`, and reads the
/// first bytes of the answer, all within `within`: an answer shorter than 64 bytes is
/// had when the server closes the connection, or else when that time ends. Use it
/// only where a connection already failed, and only on an endpoint without TLS (a
/// TLS server's answer to plain bytes tells nothing), with a `hello` the backend's own
/// server answers in a way the backend can tell (or, where it closes without a word,
/// never answers).
pub async fn probe_endpoint(endpoint: &str, hello: &[u8], within: Duration) -> Probe {
    let deadline = tokio::time::Instant::now() + within;
    let connect = tokio::net::TcpStream::connect(endpoint);
    let Ok(Ok(mut stream)) = tokio::time::timeout_at(deadline, connect).await else {
        return Probe::NoConnection;
    };
    if !matches!(
        tokio::time::timeout_at(deadline, stream.write_all(hello)).await,
        Ok(Ok(()))
    ) {
        return Probe::NoAnswer;
    }
    let mut answer = vec![0u8; 64];
    let mut read = 0;
    // An answer may come in pieces: the first full buffer, the end of the stream, or
    // the time given ends it, keeping what came.
    while read < answer.len() {
        match tokio::time::timeout_at(deadline, stream.read(&mut answer[read..])).await {
            Ok(Ok(n)) if n > 0 => read += n,
            _ => break,
        }
    }
    answer.truncate(read);
    if answer.is_empty() {
        Probe::NoAnswer
    } else {
        Probe::Answered(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_port_a_silent_one_and_an_answer_are_told_apart() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = tokio::spawn(async move {
            // The first connection is answered, the second kept silent.
            let (mut first, _) = listener.accept().await.expect("accept");
            let mut hello = [0u8; 5];
            first.read_exact(&mut hello).await.expect("read");
            assert_eq!(&hello, b"hello");
            first
                .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                .await
                .expect("write");
            drop(first);
            let (silent, _) = listener.accept().await.expect("accept");
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(silent);
        });
        let answered = probe_endpoint(&addr, b"hello", Duration::from_secs(2)).await;
        assert_eq!(
            answered.first_line().as_deref(),
            Some("HTTP/1.1 400 Bad Request")
        );
        let silent = probe_endpoint(&addr, b"hello", Duration::from_millis(200)).await;
        assert_eq!(silent, Probe::NoAnswer);
        server.abort();
        let _ = server.await;
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = closed.local_addr().expect("addr").to_string();
        drop(closed);
        let refused = probe_endpoint(&addr, b"hello", Duration::from_secs(2)).await;
        assert_eq!(refused, Probe::NoConnection);
        assert_eq!(refused.first_line(), None);
    }
}
