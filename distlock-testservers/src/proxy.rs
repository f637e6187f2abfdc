//! [`Proxy`]: a TCP proxy on 127.0.0.1 in front of a server, for one client. It
//! counts round trips, and it can cut the client off, heal, and add latency.
//!
//! # Round trips
//!
//! On each connection, a reply from the server that follows a request from the client
//! counts one. A client that sends a request and waits for its reply is counted one per
//! request; requests sent together before any reply (a pipeline, or concurrent
//! streams) count one. For plain request-reply protocols (Redis, PostgreSQL) any bytes
//! are a request or a reply. On HTTP/2 (gRPC: etcd) only HEADERS and DATA frames are:
//! the transport's own frames (SETTINGS, PING, WINDOW_UPDATE and their
//! acknowledgements) are sent without anyone waiting for them, and are not counted.
//!
//! Proxies started together by [`Proxy::start_group`] (one client's proxies to the
//! several servers it sends each operation to at once) share one count: a reply from
//! any of them that follows a request to any of them counts one, so that requests sent
//! to all servers at once and their replies count one round trip, as their time does.
//!
//! # Faults
//!
//! A cut holds every byte in both directions, and every new connection, until the
//! link is healed, as a network that drops packets would: connections stay open, and
//! only the client's and the server's own timeouts end them. Held replies are the
//! one-way fault of a lost reply: the client's bytes still reach the server, and the
//! server's are held until the heal. Latency delays every byte by the same time in
//! each direction, keeping their order.
//!
//! The connection faults act on TCP itself, until the heal. Reset after requests: a
//! request still reaches the server, then (50 ms later, so that one split across
//! reads arrives whole) its connection is reset towards the client and closed towards
//! the server, and no reply passes meanwhile. Refused connections: the proxy stops
//! listening, so a connect is refused by the system, and listens again on the same
//! port at the heal. Dropped connections: a connect is accepted, then reset at once.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{LinkControl, RoundTripMeter};
use distlock_core::BoxError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// The state of the link between the client and the server.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    cut: bool,
    /// The server's bytes are held, the client's still pass: a lost reply.
    replies_held: bool,
    /// The replies are held from the one that would make the round-trip count reach
    /// this: the lost reply of a step's later request.
    replies_held_from: Option<u64>,
    latency: Duration,
    /// Each request reaches the server, then its connection is reset.
    reset_after_requests: bool,
    /// What becomes of a new connection.
    accepting: Accepting,
}

/// What the proxy does with a new connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Accepting {
    /// Passes it on to the server.
    #[default]
    Open,
    /// Nothing listens: the system refuses it.
    Refused,
    /// Accepts it, then resets it at once.
    Dropped,
}

/// A listener on 127.0.0.1:`port` (0 for any) that can be bound again on the same
/// port once closed.
fn listen(port: u16) -> std::io::Result<TcpListener> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.listen(1024)
}

/// A proxy for one client; dropping it stops accepting connections.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    count: Arc<AtomicU64>,
    link: Arc<watch::Sender<Link>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to 127.0.0.1:`server_port`.
    pub async fn start(server_port: u16) -> std::io::Result<Self> {
        Self::start_counting(server_port, Arc::new(AtomicU64::new(0)), None).await
    }

    /// Starts a proxy to each of `server_ports` on 127.0.0.1, counting round trips
    /// together (see the module docs); each proxy's meter reads the group's count.
    pub async fn start_group(server_ports: &[u16]) -> std::io::Result<Vec<Self>> {
        let count = Arc::new(AtomicU64::new(0));
        let asked = Arc::new(AtomicBool::new(false));
        let mut proxies = Vec::new();
        for port in server_ports {
            proxies.push(Self::start_counting(*port, count.clone(), Some(asked.clone())).await?);
        }
        Ok(proxies)
    }

    /// A proxy counting into `count`, with one `asked` flag for all its connections
    /// where given (else one per connection).
    async fn start_counting(
        server_port: u16,
        count: Arc<AtomicU64>,
        shared_asked: Option<Arc<AtomicBool>>,
    ) -> std::io::Result<Self> {
        let listener = listen(0)?;
        let port = listener.local_addr()?.port();
        let link = Arc::new(watch::Sender::new(Link::default()));
        let (counter, links) = (count.clone(), link.clone());
        let accept = tokio::spawn(async move {
            let mut state = links.subscribe();
            let mut listener = Some(listener);
            loop {
                let accepting = state.borrow_and_update().accepting;
                if accepting == Accepting::Refused {
                    // Closed: a connect is refused until the heal.
                    listener = None;
                    if state.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                let open = match &listener {
                    Some(open) => open,
                    None => match listen(port) {
                        Ok(open) => listener.insert(open),
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                };
                let client = tokio::select! {
                    accepted = open.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => return,
                    },
                    changed = state.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                // Reset when closed from this side: a fault ends it as a reset does.
                let _ = client.set_zero_linger();
                if state.borrow().accepting == Accepting::Dropped {
                    drop(client);
                    continue;
                }
                let (count, mut link) = (counter.clone(), links.subscribe());
                let asked = shared_asked
                    .clone()
                    .unwrap_or_else(|| Arc::new(AtomicBool::new(false)));
                tokio::spawn(async move {
                    // A connection made during a cut waits for the heal, as a dropped
                    // SYN would be retried.
                    if link.wait_for(|l| !l.cut).await.is_err() {
                        return;
                    }
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)).await {
                        pump_pair(client, server, count, asked, link).await;
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            count,
            link,
            accept,
        })
    }

    /// The port on 127.0.0.1 that the client connects to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Lets the replies of the next `round_trips` round trips pass, then holds every
    /// later reply until the heal, as [`LinkControl::hold_replies`] does: the lost
    /// reply of a step's later request, after its earlier ones were answered.
    pub fn hold_replies_after(&self, round_trips: u64) {
        let from = self.count.load(Ordering::SeqCst) + round_trips;
        self.link.send_modify(|l| l.replies_held_from = Some(from));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl RoundTripMeter for Proxy {
    fn round_trips(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl LinkControl for Proxy {
    async fn cut(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.cut = true);
        Ok(())
    }

    async fn heal(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| {
            l.cut = false;
            l.replies_held = false;
            l.replies_held_from = None;
            l.reset_after_requests = false;
            l.accepting = Accepting::Open;
        });
        Ok(())
    }

    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.latency = one_way);
        Ok(())
    }

    fn can_hold_replies(&self) -> bool {
        true
    }

    async fn hold_replies(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.replies_held = true);
        Ok(())
    }

    fn can_fail_connections(&self) -> bool {
        true
    }

    async fn reset_after_requests(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.reset_after_requests = true);
        Ok(())
    }

    async fn refuse_connections(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.accepting = Accepting::Refused);
        Ok(())
    }

    async fn drop_new_connections(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.accepting = Accepting::Dropped);
        Ok(())
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

/// Bytes read from one side, due on the other side at `due`; `None` is the end.
struct Chunk {
    due: Instant,
    bytes: Option<Vec<u8>>,
    message: bool,
}

/// Reads one side into `chunks`, stamping each with its due time and whether it
/// carries a message (a request upstream, a reply downstream).
async fn read_side(
    mut from: OwnedReadHalf,
    chunks: mpsc::UnboundedSender<Chunk>,
    link: watch::Receiver<Link>,
    protocol: Arc<AtomicU8>,
    upstream: bool,
) {
    let mut frames = Frames {
        preface: if upstream { HTTP2_PREFACE.len() } else { 0 },
        ..Frames::default()
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        let due = Instant::now() + link.borrow().latency;
        if n == 0 {
            let _ = chunks.send(Chunk {
                due,
                bytes: None,
                message: false,
            });
            return;
        }
        let bytes = buf[..n].to_vec();
        if upstream && protocol.load(Ordering::SeqCst) == UNKNOWN {
            let http2 = bytes.starts_with(HTTP2_PREFACE);
            protocol.store(if http2 { HTTP2 } else { PLAIN }, Ordering::SeqCst);
        }
        let message = protocol.load(Ordering::SeqCst) != HTTP2 || frames.carry_a_message(&bytes);
        if chunks
            .send(Chunk {
                due,
                bytes: Some(bytes),
                message,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Writes `chunks` to one side when they are due and the link is not cut. Upstream, a
/// request marks `asked`; downstream, a reply to an asked request counts a round trip,
/// before the client can see it.
async fn write_side(
    mut to: OwnedWriteHalf,
    mut chunks: mpsc::UnboundedReceiver<Chunk>,
    mut link: watch::Receiver<Link>,
    asked: Arc<AtomicBool>,
    count: Option<Arc<AtomicU64>>,
    reset: Arc<Notify>,
) {
    // Downstream (the side that counts) carries the server's replies.
    let downstream = count.is_some();
    while let Some(chunk) = chunks.recv().await {
        sleep_until(chunk.due).await;
        // A reply that would count a round trip past the link's limit is held, and so
        // is everything after it on this connection.
        let counts = chunk.message && asked.load(Ordering::SeqCst);
        let past = |l: &Link| match (&count, l.replies_held_from) {
            (Some(count), Some(from)) => counts && count.load(Ordering::SeqCst) >= from,
            _ => false,
        };
        let passes = |l: &Link| !(l.cut || downstream && (l.replies_held || past(l)));
        if link.wait_for(passes).await.is_err() {
            return;
        }
        let resetting = link.borrow().reset_after_requests;
        if resetting && downstream {
            // A reply on a connection about to be reset never passes.
            continue;
        }
        if resetting && chunk.message {
            let reset = reset.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                reset.notify_one();
            });
        }
        let Some(bytes) = chunk.bytes else {
            let _ = to.shutdown().await;
            return;
        };
        if chunk.message {
            match &count {
                None => asked.store(true, Ordering::SeqCst),
                Some(count) => {
                    if asked.swap(false, Ordering::SeqCst) {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

async fn pump_pair(
    client: TcpStream,
    server: TcpStream,
    count: Arc<AtomicU64>,
    asked: Arc<AtomicBool>,
    link: watch::Receiver<Link>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let protocol = Arc::new(AtomicU8::new(UNKNOWN));
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    let reset = Arc::new(Notify::new());
    let pumps = async {
        tokio::join!(
            read_side(client_read, up_tx, link.clone(), protocol.clone(), true),
            write_side(
                server_write,
                up_rx,
                link.clone(),
                asked.clone(),
                None,
                reset.clone()
            ),
            read_side(server_read, down_tx, link.clone(), protocol, false),
            write_side(
                client_write,
                down_rx,
                link,
                asked,
                Some(count),
                reset.clone()
            ),
        )
    };
    // Reset: every half is dropped, the client's with no linger (a reset), the
    // server's closed as a client that went away.
    tokio::select! {
        _ = pumps => {}
        () = reset.notified() => {}
    }
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

    /// An echo server on loopback, for the proxy to stand in front of.
    async fn echo() -> u16 {
        counting_echo().await.0
    }

    /// An echo server on loopback that answers each byte and counts the bytes that
    /// reach it: its port and its count.
    async fn counting_echo() -> (u16, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(AtomicU64::new(0));
        let counted = received.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = conn.read(&mut buf).await {
                        counted.fetch_add(n as u64, Ordering::SeqCst);
                        if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (port, received)
    }

    async fn exchange(conn: &mut TcpStream) -> Duration {
        let sent = Instant::now();
        conn.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).await.expect("read");
        sent.elapsed()
    }

    #[tokio::test]
    async fn it_counts_exchanges_holds_a_cut_and_adds_latency() {
        let proxy = Proxy::start(echo().await).await.expect("proxy");
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        exchange(&mut conn).await;
        exchange(&mut conn).await;
        assert_eq!(proxy.round_trips(), 2);

        proxy.cut().await.expect("cut");
        conn.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        let held =
            tokio::time::timeout(Duration::from_millis(200), conn.read_exact(&mut buf)).await;
        assert!(held.is_err(), "a reply crossed a cut link");
        proxy.heal().await.expect("heal");
        conn.read_exact(&mut buf).await.expect("the held reply");
        assert_eq!(&buf, b"ping");

        proxy
            .set_latency(Duration::from_millis(50))
            .await
            .expect("latency");
        let took = exchange(&mut conn).await;
        assert!(took >= Duration::from_millis(100), "took only {took:?}");
    }

    #[tokio::test]
    async fn held_replies_let_requests_through_and_hold_what_comes_back() {
        let (port, received) = counting_echo().await;
        let proxy = Proxy::start(port).await.expect("proxy");
        assert!(proxy.can_hold_replies());
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        exchange(&mut conn).await;
        proxy.hold_replies().await.expect("hold");
        conn.write_all(b"late").await.expect("write");
        let mut buf = [0u8; 4];
        let held =
            tokio::time::timeout(Duration::from_millis(200), conn.read_exact(&mut buf)).await;
        assert!(held.is_err(), "a reply crossed while replies were held");
        assert_eq!(
            received.load(Ordering::SeqCst),
            8,
            "the request did not reach the server"
        );
        proxy.heal().await.expect("heal");
        conn.read_exact(&mut buf).await.expect("the held reply");
        assert_eq!(&buf, b"late");
    }

    #[tokio::test]
    async fn replies_held_after_a_round_trip_let_the_first_through_only() {
        let (port, received) = counting_echo().await;
        let proxy = Proxy::start(port).await.expect("proxy");
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        proxy.hold_replies_after(1);
        exchange(&mut conn).await;
        conn.write_all(b"late").await.expect("write");
        let mut buf = [0u8; 4];
        let held =
            tokio::time::timeout(Duration::from_millis(200), conn.read_exact(&mut buf)).await;
        assert!(held.is_err(), "the second round trip's reply crossed");
        assert_eq!(
            received.load(Ordering::SeqCst),
            8,
            "the request did not reach the server"
        );
        proxy.heal().await.expect("heal");
        conn.read_exact(&mut buf).await.expect("the held reply");
        assert_eq!(&buf, b"late");
        exchange(&mut conn).await;
    }

    #[tokio::test]
    async fn connection_faults_reset_refuse_and_drop_until_the_heal() {
        let (port, received) = counting_echo().await;
        let proxy = Proxy::start(port).await.expect("proxy");
        assert!(proxy.can_fail_connections());
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect");
        exchange(&mut conn).await;

        // Reset after the request: it reaches the server, no reply comes back, and
        // the connection ends.
        proxy.reset_after_requests().await.expect("reset");
        conn.write_all(b"gone").await.expect("write");
        let mut buf = [0u8; 4];
        let ended = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
            .await
            .expect("the connection ends");
        assert!(
            matches!(ended, Ok(0) | Err(_)),
            "a reply crossed: {ended:?}"
        );
        assert_eq!(
            received.load(Ordering::SeqCst),
            8,
            "the request reached the server"
        );

        // Refused: nothing listens.
        proxy.refuse_connections().await.expect("refuse");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = TcpStream::connect(("127.0.0.1", proxy.port())).await;
        assert_eq!(
            refused.map(drop).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionRefused)
        );

        // Dropped: accepted, then reset before anything passes.
        proxy.drop_new_connections().await.expect("drop");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut dropped = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("accepted");
        let _ = dropped.write_all(b"ping").await;
        let ended = tokio::time::timeout(Duration::from_secs(2), dropped.read(&mut buf))
            .await
            .expect("the connection ends");
        assert!(matches!(ended, Ok(0) | Err(_)), "{ended:?}");

        // Healed: the same port serves again.
        proxy.heal().await.expect("heal");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut again = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .expect("connect after the heal");
        exchange(&mut again).await;
    }
}
