//! What a service can watch of its locks: the client's metrics (feature `metrics`) and
//! its tracing spans and events, as the crate docs list them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::OperatorBackend;
use distlock_core::{ErrorKind, LockClient, LockKey, LockOptions, LossReason, MemoryBackend};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

const TTL: Duration = Duration::from_millis(300);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// Runs `work` with a recorder of this thread's own; what it recorded.
fn recorded<F: Future<Output = ()>>(work: F) -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || runtime().block_on(work));
    snapshotter
}

type Labels = BTreeMap<String, String>;

fn series(snapshotter: &Snapshotter) -> Vec<(MetricKind, String, Labels, DebugValue)> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (kind, key.name().to_owned(), labels, value)
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn value<'a>(
    all: &'a [(MetricKind, String, Labels, DebugValue)],
    name: &str,
    pairs: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    let wanted = labels(pairs);
    all.iter()
        .find(|(_, n, l, _)| n == name && *l == wanted)
        .map(|(_, _, _, v)| v)
}

fn count(
    all: &[(MetricKind, String, Labels, DebugValue)],
    name: &str,
    pairs: &[(&str, &str)],
) -> u64 {
    match value(all, name, pairs) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} {pairs:?} is {other:?}, not a counter"),
    }
}

fn samples(
    all: &[(MetricKind, String, Labels, DebugValue)],
    name: &str,
    pairs: &[(&str, &str)],
) -> Vec<f64> {
    match value(all, name, pairs) {
        Some(DebugValue::Histogram(v)) => v.iter().map(|f| f.into_inner()).collect(),
        None => Vec::new(),
        Some(other) => panic!("{name} {pairs:?} is {other:?}, not a histogram"),
    }
}

fn gauge(all: &[(MetricKind, String, Labels, DebugValue)], pairs: &[(&str, &str)]) -> f64 {
    match value(all, "distlock_held", pairs) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("distlock_held {pairs:?} is {other:?}"),
    }
}

fn clients(backend: &Arc<MemoryBackend>, options: LockOptions) -> (LockClient, LockClient) {
    let one = LockClient::with_options(backend.clone(), options.clone()).expect("options");
    let two = LockClient::with_options(backend.clone(), options).expect("options");
    (one, two)
}

#[test]
fn every_outcome_renewal_loss_and_hold_is_counted_by_backend() {
    let held_midway = Arc::new(Mutex::new(None));
    let backend = Arc::new(MemoryBackend::new());
    let snapshotter = {
        let held_midway = held_midway.clone();
        let backend = backend.clone();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let probe = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            runtime().block_on(async move {
                let (client, other) = clients(&backend, LockOptions::new(TTL));
                let wait = Duration::from_secs(2);
                // Acquired, then busy and timed out for another client.
                let a = client.lock("a", wait).await.expect("free");
                assert!(other.try_lock("a").await.expect("try").is_err());
                let late = other.lock("a", Duration::from_millis(50)).await;
                assert_eq!(
                    late.map(drop).map_err(|e| e.kind()),
                    Err(ErrorKind::Timeout)
                );
                // Held across renewals, then released.
                tokio::time::sleep(TTL * 2).await;
                let b = client.lock("b", wait).await.expect("free");
                // A snapshot takes the histograms' samples: they are counted in too.
                *held_midway.lock().expect("lock") = Some(series(&probe));
                a.release().await.expect("held");
                // Deleted behind the holder's back: lost, not held.
                let lost = b.lost();
                tokio::time::sleep(TTL / 2).await;
                let key = LockKey::new("b").expect("key");
                assert!(backend.force_release(&key).await.expect("force"));
                assert_eq!(lost.await, Some(LossReason::NotHeld));
                drop(b);
                // A server that stops answering: renewals fail until the lease is lost.
                let c = client.lock("c", wait).await.expect("free");
                let lost = c.lost();
                backend.pause();
                assert_eq!(lost.await, Some(LossReason::RenewalFailed));
                backend.resume();
                drop(c);
                // A server that is down: an error.
                backend.stop();
                let down = client.try_lock("d").await.map(drop).map_err(|e| e.kind());
                assert_eq!(down, Err(ErrorKind::Unavailable));
                backend.start();
            })
        });
        snapshotter
    };
    let midway = held_midway
        .lock()
        .expect("lock")
        .take()
        .expect("a midway snapshot");
    // A snapshot takes what it reads (counts, gauges, samples): the two add up.
    let held_then = gauge(&midway, &[("backend", "memory")]);
    let mut all = series(&snapshotter);
    for (kind, name, labels, early) in midway {
        let later = all
            .iter_mut()
            .find(|(_, n, l, _)| *n == name && *l == labels);
        match (early, later) {
            (DebugValue::Counter(a), Some((_, _, _, DebugValue::Counter(b)))) => *b += a,
            (DebugValue::Gauge(a), Some((_, _, _, DebugValue::Gauge(b)))) => {
                *b = (a.into_inner() + b.into_inner()).into()
            }
            (DebugValue::Histogram(a), Some((_, _, _, DebugValue::Histogram(b)))) => {
                b.extend(a.iter().copied())
            }
            (value, None) => all.push((kind, name, labels, value)),
            (a, Some(b)) => panic!("{name}: {a:?} then {:?}", b.3),
        }
    }
    let memory = ("backend", "memory");
    let acquisitions = "distlock_acquisitions_total";
    assert_eq!(
        count(&all, acquisitions, &[memory, ("outcome", "acquired")]),
        3
    );
    assert_eq!(count(&all, acquisitions, &[memory, ("outcome", "busy")]), 1);
    assert_eq!(
        count(&all, acquisitions, &[memory, ("outcome", "timeout")]),
        1
    );
    assert_eq!(
        count(&all, acquisitions, &[memory, ("outcome", "error")]),
        1
    );
    let waits = samples(
        &all,
        "distlock_wait_seconds",
        &[memory, ("outcome", "timeout")],
    );
    assert_eq!(waits.len(), 1);
    assert!(
        waits[0] >= 0.05,
        "a 50 ms wait that timed out lasted {}",
        waits[0]
    );
    assert_eq!(
        samples(
            &all,
            "distlock_wait_seconds",
            &[memory, ("outcome", "acquired")]
        )
        .len(),
        3
    );

    let renewals = "distlock_renewals_total";
    assert!(count(&all, renewals, &[memory, ("result", "renewed")]) >= 4);
    assert_eq!(count(&all, renewals, &[memory, ("result", "not_held")]), 1);
    assert!(count(&all, renewals, &[memory, ("result", "failed")]) >= 1);

    let losses = "distlock_losses_total";
    assert_eq!(count(&all, losses, &[memory, ("reason", "not_held")]), 1);
    assert_eq!(
        count(&all, losses, &[memory, ("reason", "renewal_failed")]),
        1
    );
    assert_eq!(count(&all, losses, &[memory, ("reason", "released")]), 0);

    let holds = samples(&all, "distlock_hold_seconds", &[memory]);
    assert_eq!(holds.len(), 3, "{holds:?}");
    assert!(
        holds.iter().any(|h| *h >= (TTL * 2).as_secs_f64()),
        "{holds:?}"
    );
    assert_eq!(held_then, 2.0, "two locks held midway");
    assert_eq!(gauge(&all, &[memory]), 0.0);
    // No series carries a key unless asked to.
    assert!(all.iter().all(|(_, _, l, _)| !l.contains_key("key")));
}

#[test]
fn circuit_breaker_transitions_are_counted_by_state() {
    let backend = Arc::new(MemoryBackend::new());
    let options = LockOptions::new(TTL).with_circuit_breaker(distlock_core::BreakerOptions::new(
        2,
        Duration::from_millis(100),
    ));
    let snapshotter = recorded({
        let backend = backend.clone();
        async move {
            let client = LockClient::with_options(backend.clone(), options).expect("options");
            backend.stop();
            for _ in 0..2 {
                let e = client.try_lock("k").await.expect_err("down");
                assert_eq!(e.kind(), ErrorKind::Unavailable);
            }
            let open = client.try_lock("k").await.expect_err("open");
            assert_eq!(open.kind(), ErrorKind::CircuitOpen);
            backend.start();
            tokio::time::sleep(Duration::from_millis(150)).await;
            let guard = client.try_lock("k").await.expect("probe").expect("free");
            guard.release().await.expect("released");
        }
    });
    let all = series(&snapshotter);
    for state in ["open", "half-open", "closed"] {
        assert_eq!(
            count(
                &all,
                "distlock_breaker_transitions_total",
                &[("backend", "memory"), ("state", state)]
            ),
            1,
            "{state}: {all:?}"
        );
    }
}

#[test]
fn every_request_to_the_backend_is_counted_by_step_and_result_behind_the_breaker() {
    let backend = Arc::new(MemoryBackend::new());
    let options = LockOptions::new(TTL)
        .with_auto_renew(false)
        .with_circuit_breaker(distlock_core::BreakerOptions::new(
            2,
            Duration::from_secs(60),
        ));
    let snapshotter = recorded({
        let backend = backend.clone();
        async move {
            let (client, other) = clients(&backend, options);
            // Two grants answered (one granted, one found held), a renewal, a release
            // and a ping.
            let guard = client.try_lock("k").await.expect("try").expect("free");
            assert!(other.try_lock("k").await.expect("try").is_err());
            guard.extend(TTL).await.expect("renewed");
            guard.release().await.expect("released");
            client.health().await.expect("healthy");
            // A server that stalls: a wait's deadline gives up the watch it was
            // opening, a caller's time-out the grant in flight.
            backend.pause();
            let stalled = client.lock("s", Duration::from_millis(100)).await;
            assert_eq!(
                stalled.map(drop).map_err(|e| e.kind()),
                Err(ErrorKind::Timeout)
            );
            let given_up = tokio::time::timeout(Duration::from_millis(100), client.try_lock("s"));
            assert!(given_up.await.is_err(), "the server is paused");
            backend.resume();
            client.flush().await;
            // A server that is down: two requests fail, then the breaker opens and
            // refuses the third before it is sent.
            backend.stop();
            for _ in 0..2 {
                let e = client.try_lock("d").await.expect_err("down");
                assert_eq!(e.kind(), ErrorKind::Unavailable);
            }
            let open = client.try_lock("d").await.expect_err("open");
            assert_eq!(open.kind(), ErrorKind::CircuitOpen);
            backend.start();
        }
    });
    let all = series(&snapshotter);
    let requests = |step: &str, result: &str| {
        count(
            &all,
            "distlock_backend_requests_total",
            &[("backend", "memory"), ("step", step), ("result", result)],
        )
    };
    assert_eq!(requests("grant", "ok"), 2, "{all:?}");
    assert_eq!(requests("renew", "ok"), 1, "{all:?}");
    // The guard's release, and the cleanup of the grant given up (the server may
    // have applied it).
    assert_eq!(requests("release", "ok"), 2, "{all:?}");
    assert_eq!(requests("ping", "ok"), 1, "{all:?}");
    assert_eq!(requests("watch", "cancelled"), 1, "{all:?}");
    assert_eq!(requests("grant", "cancelled"), 1, "{all:?}");
    assert_eq!(requests("grant", "unavailable"), 2, "{all:?}");
    // The call the breaker refused never reached the backend.
    assert_eq!(requests("grant", "error"), 0, "{all:?}");
    let timed = samples(
        &all,
        "distlock_backend_request_seconds",
        &[
            ("backend", "memory"),
            ("step", "grant"),
            ("result", "cancelled"),
        ],
    );
    assert_eq!(timed.len(), 1, "{all:?}");
    assert!(timed[0] >= 0.09, "the stalled request was timed: {timed:?}");
}

#[test]
fn keys_are_labels_only_when_asked_for() {
    let backend = Arc::new(MemoryBackend::new());
    let snapshotter = recorded(async move {
        let options = LockOptions::new(TTL).with_key_labels(true);
        let (client, _) = clients(&backend, options.clone());
        let guard = client
            .lock("reports", Duration::from_secs(1))
            .await
            .expect("free");
        // A renewal by hand is counted as an automatic one is.
        guard.extend(TTL).await.expect("held");
        guard.release().await.expect("held");
        // The kinds are counted as locks are, by their name.
        let permits = LockClient::with_options(backend.clone(), options)
            .and_then(|c| c.semaphore("reports", 2))
            .expect("a semaphore");
        let permit = permits
            .try_acquire()
            .await
            .expect("free")
            .expect("a permit");
        permit.release().await.expect("held");
    });
    let all = series(&snapshotter);
    let renewed = [
        ("backend", "memory"),
        ("key", "reports"),
        ("result", "renewed"),
    ];
    assert_eq!(count(&all, "distlock_renewals_total", &renewed), 1);
    let pairs = [
        ("backend", "memory"),
        ("key", "reports"),
        ("outcome", "acquired"),
    ];
    assert_eq!(count(&all, "distlock_acquisitions_total", &pairs), 2);
    assert_eq!(
        samples(
            &all,
            "distlock_hold_seconds",
            &[("backend", "memory"), ("key", "reports")]
        )
        .len(),
        2
    );
}

/// What a span or an event carried.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    level: Option<Level>,
    fields: BTreeMap<String, String>,
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields
            .insert(field.name().to_owned(), value.to_string());
    }
}

/// Keeps every closed span and every event.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Mutex<Vec<Seen>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: attrs.metadata().name().to_owned(),
            level: Some(*attrs.metadata().level()),
            ..Seen::default()
        };
        attrs.record(&mut seen);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(seen);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(seen) = span.extensions_mut().get_mut::<Seen>() {
                values.record(seen);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: event.metadata().name().to_owned(),
            level: Some(*event.metadata().level()),
            ..Seen::default()
        };
        event.record(&mut seen);
        self.events.lock().expect("lock").push(seen);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(seen) = span.extensions().get::<Seen>() {
                self.spans.lock().expect("lock").push(seen.clone());
            }
        }
    }
}

#[test]
fn spans_carry_key_backend_fence_and_outcome_and_grants_and_losses_are_reported() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let backend = Arc::new(MemoryBackend::new());
    let fence = tracing::subscriber::with_default(subscriber, || {
        runtime().block_on(async move {
            let (client, other) = clients(&backend, LockOptions::new(TTL));
            let guard = client
                .lock("ledger", Duration::from_secs(1))
                .await
                .expect("free");
            assert!(other.try_lock("ledger").await.expect("try").is_err());
            let fence = guard.fence().get();
            let lost = guard.lost();
            tokio::time::sleep(TTL / 2).await;
            let key = LockKey::new("ledger").expect("key");
            assert!(backend.force_release(&key).await.expect("force"));
            assert_eq!(lost.await, Some(LossReason::NotHeld));
            drop(guard);
            fence
        })
    });
    let spans = capture.spans.lock().expect("lock").clone();
    let acquired = spans
        .iter()
        .find(|s| s.name == "lock_acquire")
        .unwrap_or_else(|| panic!("no lock_acquire span in {spans:?}"));
    assert_eq!(acquired.level, Some(Level::INFO));
    for (field, wanted) in [
        ("key", "ledger".to_owned()),
        ("backend", "memory".to_owned()),
        ("fence", fence.to_string()),
        ("outcome", "acquired".to_owned()),
    ] {
        assert_eq!(
            acquired.fields.get(field),
            Some(&wanted),
            "{field} in {acquired:?}"
        );
    }
    let tried = spans
        .iter()
        .find(|s| s.name == "lock_try_acquire")
        .unwrap_or_else(|| panic!("no lock_try_acquire span in {spans:?}"));
    assert_eq!(
        tried.fields.get("outcome").map(String::as_str),
        Some("busy")
    );
    assert!(!tried.fields.contains_key("fence"), "{tried:?}");

    let events = capture.events.lock().expect("lock").clone();
    let message = |s: &Seen| s.fields.get("message").cloned().unwrap_or_default();
    let grant = events
        .iter()
        .find(|e| message(e) == "lock acquired")
        .unwrap_or_else(|| panic!("no grant event in {events:?}"));
    assert_eq!(grant.level, Some(Level::INFO));
    assert_eq!(grant.fields.get("fence"), Some(&fence.to_string()));
    assert_eq!(grant.fields.get("key").map(String::as_str), Some("ledger"));
    let loss = events
        .iter()
        .find(|e| message(e).starts_with("lock lost"))
        .unwrap_or_else(|| panic!("no loss event in {events:?}"));
    assert!(
        loss.level <= Some(Level::INFO) && loss.level.is_some(),
        "{loss:?}"
    );
    assert_eq!(
        loss.fields.get("reason").map(String::as_str),
        Some("not_held")
    );
    assert_eq!(loss.fields.get("fence"), Some(&fence.to_string()));
    assert_eq!(
        loss.fields.get("backend").map(String::as_str),
        Some("memory")
    );
}

#[test]
fn a_lock_broken_by_force_is_logged_at_warn_with_its_key() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let backend = Arc::new(MemoryBackend::new());
    tracing::subscriber::with_default(subscriber, || {
        runtime().block_on(async move {
            let (client, operator) = clients(&backend, LockOptions::new(TTL));
            let _guard = client
                .lock("ledger", Duration::from_secs(1))
                .await
                .expect("free");
            assert!(operator.force_release("ledger").await.expect("force"));
            // Nothing broken, nothing logged.
            assert!(!operator.force_release("ledger").await.expect("force"));
        })
    });
    let events = capture.events.lock().expect("lock").clone();
    let broken: Vec<&Seen> = events
        .iter()
        .filter(|e| {
            e.fields
                .get("message")
                .is_some_and(|m| m.contains("broken by force"))
        })
        .collect();
    assert_eq!(broken.len(), 1, "{events:?}");
    assert_eq!(broken[0].level, Some(Level::WARN));
    assert_eq!(
        broken[0].fields.get("key").map(String::as_str),
        Some("ledger")
    );
}
