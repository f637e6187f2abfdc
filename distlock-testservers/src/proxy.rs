//! [`RoundTripProxy`]: a TCP proxy on 127.0.0.1 in front of a server that counts round
//! trips: on each connection, a reply from the server that follows a request from the
//! client counts one. A client that sends a request and waits for its reply is counted
//! one per request; requests sent together before any reply (a pipeline, or
//! concurrent streams) count one.
//!
//! For plain request-reply protocols (Redis, PostgreSQL) any bytes are a request or a
//! reply. On HTTP/2 (gRPC: etcd) only HEADERS and DATA frames are: the transport's own
//! frames (SETTINGS, PING, WINDOW_UPDATE and their acknowledgements) are sent without
//! anyone waiting for them, and are not counted.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use distlock_conformance::RoundTripMeter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A counting proxy; dropping it stops accepting connections.
#[derive(Debug)]
pub struct RoundTripProxy {
    port: u16,
    count: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl RoundTripProxy {
    /// Starts a proxy to 127.0.0.1:`server_port`.
    pub async fn start(server_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let count = Arc::new(AtomicU64::new(0));
        let counter = count.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await else {
                    continue;
                };
                tokio::spawn(pump_pair(client, server, counter.clone()));
            }
        });
        Ok(RoundTripProxy {
            port,
            count,
            accept,
        })
    }

    /// The port on 127.0.0.1 that clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RoundTripProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RoundTripMeter for RoundTripProxy {
    fn round_trips(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

/// What the connection speaks, as its first bytes from the client tell.
const UNKNOWN: u8 = 0;
const PLAIN: u8 = 1;
const HTTP2: u8 = 2;

/// The client's first bytes on an HTTP/2 connection.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads HTTP/2 frame headers out of one direction's bytes, across reads.
#[derive(Debug, Default)]
struct Frames {
    /// Bytes of the connection preface still to pass over (client side only).
    preface: usize,
    /// Payload bytes of the current frame still to pass over.
    payload: usize,
    /// The part of the next frame header read so far.
    header: Vec<u8>,
}

impl Frames {
    /// Whether `bytes` complete the header of a HEADERS or DATA frame.
    fn carry_a_message(&mut self, mut bytes: &[u8]) -> bool {
        let mut message = false;
        while !bytes.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                bytes = &bytes[n..];
            } else if self.payload > 0 {
                let n = self.payload.min(bytes.len());
                self.payload -= n;
                bytes = &bytes[n..];
            } else {
                let n = (9 - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..n]);
                bytes = &bytes[n..];
                if self.header.len() == 9 {
                    let h = &self.header;
                    self.payload =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    // Frame types 0 (DATA) and 1 (HEADERS) carry requests and replies.
                    message |= h[3] <= 1;
                    self.header.clear();
                }
            }
        }
        message
    }
}

async fn pump_pair(client: TcpStream, server: TcpStream, count: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Whether the client sent a request since the server last replied.
    let asked = Arc::new(AtomicBool::new(false));
    let asking = asked.clone();
    let protocol = Arc::new(AtomicU8::new(UNKNOWN));
    let spoken = protocol.clone();
    let upstream = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut frames = Frames {
            preface: HTTP2_PREFACE.len(),
            ..Frames::default()
        };
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let bytes = &buf[..n];
            if spoken.load(Ordering::SeqCst) == UNKNOWN {
                let http2 = bytes.starts_with(HTTP2_PREFACE);
                spoken.store(if http2 { HTTP2 } else { PLAIN }, Ordering::SeqCst);
            }
            let request = spoken.load(Ordering::SeqCst) == PLAIN || frames.carry_a_message(bytes);
            // Marked before the bytes go on, so the reply cannot arrive first.
            if request {
                asking.store(true, Ordering::SeqCst);
            }
            if server_write.write_all(bytes).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let downstream = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut frames = Frames::default();
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let reply =
                protocol.load(Ordering::SeqCst) != HTTP2 || frames.carry_a_message(&buf[..n]);
            // Counted before the client can see the reply.
            if reply && asked.swap(false, Ordering::SeqCst) {
                count.fetch_add(1, Ordering::SeqCst);
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload: usize) -> Vec<u8> {
        let len = u32::try_from(payload).unwrap_or(0).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 1];
        f.resize(9 + payload, 7);
        f
    }

    #[test]
    fn only_headers_and_data_frames_carry_messages_across_reads() {
        let mut frames = Frames::default();
        assert!(!frames.carry_a_message(&frame(4, 6))); // SETTINGS
        assert!(!frames.carry_a_message(&frame(6, 8))); // PING
        assert!(!frames.carry_a_message(&frame(8, 4))); // WINDOW_UPDATE
        let headers = frame(1, 30);
        assert!(
            !frames.carry_a_message(&headers[..5]),
            "half a header is no frame yet"
        );
        assert!(frames.carry_a_message(&headers[5..]));
        let mut both = frame(8, 4);
        both.extend(frame(0, 100));
        assert!(frames.carry_a_message(&both));
    }

    #[test]
    fn the_client_preface_is_passed_over() {
        let mut frames = Frames {
            preface: HTTP2_PREFACE.len(),
            ..Frames::default()
        };
        let mut bytes = HTTP2_PREFACE.to_vec();
        bytes.extend(frame(4, 0));
        assert!(!frames.carry_a_message(&bytes));
        assert!(frames.carry_a_message(&frame(1, 3)));
    }
}
