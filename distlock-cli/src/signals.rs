//! The signals that stop distlock (SIGINT, SIGTERM and SIGHUP): `run` passes them on
//! to its command, `elect` resigns and `observe` ends on them.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// SIGINT, SIGTERM and SIGHUP as they come.
pub(crate) struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        let wanted = [
            (Signal::SIGINT, SignalKind::interrupt()),
            (Signal::SIGTERM, SignalKind::terminate()),
            (Signal::SIGHUP, SignalKind::hangup()),
        ];
        let streams = wanted
            .into_iter()
            .filter_map(|(name, kind)| signal(kind).ok().map(|s| (name, s)))
            .collect();
        Signals { streams }
    }

    /// The next signal received; pending forever if none can be.
    pub(crate) async fn next(&mut self) -> Option<Signal> {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.streams.iter_mut().map(|(name, stream)| {
            let name = *name;
            Box::pin(async move { stream.recv().await.map(|()| name) })
        });
        futures_util::future::select_all(waits).await.0
    }
}
