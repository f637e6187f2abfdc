//! The kinds beyond the mutex on the memory backend: what the conformance suite does
//! not reach (an observer that falls behind the record of terms; bad input).

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{MAX_CLAIM_VALUE, TERMS_KEPT};
use distlock_core::{ErrorKind, LockClient, MemoryBackend, Observation};
use futures_util::StreamExt;

const WAIT: Duration = Duration::from_secs(1);

#[tokio::test]
async fn an_observer_behind_the_record_is_told_it_missed_terms() {
    let backend = Arc::new(MemoryBackend::new());
    let election = LockClient::new(backend)
        .election("behind")
        .expect("an election");
    let mut observer = election.observe();
    assert_eq!(
        observer.next().await.map(|o| o.map_err(|e| e.kind())),
        Some(Ok(Observation::Vacant))
    );
    let mut fences = Vec::new();
    for n in 0..TERMS_KEPT + 5 {
        let term = election
            .campaign(&format!("leader-{n}"), WAIT)
            .await
            .expect("elected");
        fences.push(term.fence());
        term.resign().await.expect("resigned");
    }
    // The observer had not looked: the first five terms are gone from the record.
    let mut seen = Vec::new();
    loop {
        match observer.next().await.expect("an item").expect("no error") {
            Observation::Missed => seen.push(None),
            Observation::Elected(leader) => seen.push(Some(leader.fence)),
            Observation::Vacant => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut expected = vec![None];
    expected.extend(fences[5..].iter().copied().map(Some));
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn bad_counts_limits_and_values_are_configuration_errors() {
    let backend = Arc::new(MemoryBackend::new());
    assert_eq!(
        LockClient::new(backend.clone())
            .semaphore("zero", 0)
            .map(drop)
            .map_err(|e| e.kind()),
        Err(ErrorKind::Configuration)
    );
    let permits = LockClient::new(backend.clone())
        .semaphore("three", 3)
        .expect("a semaphore");
    for count in [0, 4] {
        assert_eq!(
            permits
                .acquire_many(count, WAIT)
                .await
                .map(drop)
                .map_err(|e| e.kind()),
            Err(ErrorKind::Configuration)
        );
    }
    let election = LockClient::new(backend.clone())
        .election("values")
        .expect("an election");
    for bad in ["nul\0".to_owned(), "x".repeat(MAX_CLAIM_VALUE + 1)] {
        assert_eq!(
            election
                .campaign(&bad, WAIT)
                .await
                .map(drop)
                .map_err(|e| e.kind()),
            Err(ErrorKind::Configuration)
        );
    }
    assert_eq!(
        LockClient::new(backend)
            .rw_lock("")
            .map(drop)
            .map_err(|e| e.kind()),
        Err(ErrorKind::InvalidKey)
    );
    // A backend without permits is refused when the kind is made.
    let no_permits = Arc::new(NoPermits(MemoryBackend::new()));
    assert_eq!(
        LockClient::new(no_permits)
            .semaphore("x", 1)
            .map(drop)
            .map_err(|e| e.kind()),
        Err(ErrorKind::Configuration)
    );
}

/// The memory backend with its permits hidden.
#[derive(Debug)]
struct NoPermits(MemoryBackend);

#[async_trait::async_trait]
impl distlock_core::LockBackend for NoPermits {
    fn name(&self) -> &str {
        "no-permits"
    }
    fn capabilities(&self) -> &distlock_core::backend::Capabilities {
        self.0.capabilities()
    }
    async fn try_grant(
        &self,
        request: &distlock_core::backend::AcquireRequest,
    ) -> distlock_core::Result<distlock_core::backend::Grant> {
        self.0.try_grant(request).await
    }
    async fn release(
        &self,
        key: &distlock_core::LockKey,
        owner: &distlock_core::backend::OwnerToken,
    ) -> distlock_core::Result<distlock_core::backend::ReleaseOutcome> {
        self.0.release(key, owner).await
    }
    async fn renew(
        &self,
        request: &distlock_core::backend::ExtendRequest,
    ) -> distlock_core::Result<distlock_core::backend::Renewal> {
        self.0.renew(request).await
    }
    async fn inspect(
        &self,
        key: &distlock_core::LockKey,
    ) -> distlock_core::Result<Option<distlock_core::LockInfo>> {
        self.0.inspect(key).await
    }
}

/// A semaphore, a read-write lock and an election each keep one circuit breaker for
/// all their calls, as a client does: it opens after the failures its options count,
/// across calls, and then fails at once without asking the server.
#[tokio::test]
async fn the_kinds_circuit_breaker_opens_across_their_calls() {
    use distlock_core::{BreakerOptions, LockOptions};
    let backend = Arc::new(MemoryBackend::new());
    let options = LockOptions::new(Duration::from_secs(5))
        .with_circuit_breaker(BreakerOptions::new(2, Duration::from_secs(60)));
    let semaphore = LockClient::with_options(backend.clone(), options.clone())
        .and_then(|c| c.semaphore("slots", 2))
        .expect("semaphore");
    let rwlock = LockClient::with_options(backend.clone(), options.clone())
        .and_then(|c| c.rw_lock("table"))
        .expect("rwlock");
    let election = LockClient::with_options(backend.clone(), options)
        .and_then(|c| c.election("leader"))
        .expect("election");
    backend.stop();
    for _ in 0..2 {
        let down = semaphore
            .try_acquire()
            .await
            .expect_err("the server is down");
        assert_eq!(down.kind(), ErrorKind::Unavailable, "{down}");
        let down = rwlock.try_read().await.expect_err("the server is down");
        assert_eq!(down.kind(), ErrorKind::Unavailable, "{down}");
        let down = election
            .try_campaign("a")
            .await
            .expect_err("the server is down");
        assert_eq!(down.kind(), ErrorKind::Unavailable, "{down}");
    }
    let open = semaphore.try_acquire().await.expect_err("open");
    assert_eq!(open.kind(), ErrorKind::CircuitOpen, "{open}");
    // How long it stays open, for a service's Retry-After.
    let after = open.retry_after().expect("the time it stays open");
    assert!(
        after > Duration::from_secs(50) && after <= Duration::from_secs(60),
        "{after:?}"
    );
    // Readers and writers share the lock's breaker.
    let open = rwlock.try_write().await.expect_err("open");
    assert_eq!(open.kind(), ErrorKind::CircuitOpen, "{open}");
    let open = election.try_campaign("a").await.expect_err("open");
    assert_eq!(open.kind(), ErrorKind::CircuitOpen, "{open}");
}

/// The leader loop on the memory backend: the first candidate leads and the second
/// hears of it; a term whose work returns is resigned, and the other candidate takes
/// the next; shutting down resigns at once; health tells who leads.
#[tokio::test(start_paused = true)]
async fn a_leader_loop_leads_hands_over_and_resigns_on_shutdown() {
    use std::sync::Mutex;

    let backend = Arc::new(MemoryBackend::new());
    let candidate = |value: &str| {
        LockClient::new(backend.clone())
            .election("loop")
            .and_then(|e| e.leader_loop(value))
            .expect("a leader loop")
    };
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (
        candidate("a").with_retry(Duration::from_secs(5)),
        candidate("b").on_new_leader({
            let heard = heard.clone();
            move |leader| heard.lock().expect("heard").push(leader.value.clone())
        }),
    );
    let (a_health, b_health) = (a.health(), b.health());
    let terms = Arc::new(Mutex::new(Vec::new()));
    let (stop_a, a_stopped) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, b_stopped) = tokio::sync::oneshot::channel::<()>();
    // A's work ends after a second: its term ends with it.
    let a_run = tokio::spawn(a.run(
        {
            let terms = terms.clone();
            move |term| {
                let terms = terms.clone();
                async move {
                    terms.lock().expect("terms").push(("a", term.fence()));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        },
        async move {
            let _ = a_stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(a_health.is_leading());
    a_health.check().expect("a sound term");
    // B's work leads until its term is lost or the loop shuts down.
    let b_run = tokio::spawn(b.run(
        {
            let terms = terms.clone();
            move |term| {
                let terms = terms.clone();
                async move {
                    terms.lock().expect("terms").push(("b", term.fence()));
                    term.lost().await;
                }
            }
        },
        async move {
            let _ = b_stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b_health.is_leading(), "two leaders");
    // A's work returns at 1 s: it resigns, and B is elected at once.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!a_health.is_leading());
    assert!(b_health.is_leading());
    stop_b.send(()).expect("b runs");
    b_run.await.expect("joined").expect("b shut down");
    assert!(!b_health.is_leading());
    // B resigned on its way out: A leads again once its retry delay (5 s from its
    // resignation) has passed.
    let mut waited = Duration::ZERO;
    while !a_health.is_leading() {
        assert!(waited < Duration::from_secs(5), "A did not lead again");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    stop_a.send(()).expect("a runs");
    a_run.await.expect("joined").expect("a shut down");

    let terms = terms.lock().expect("terms").clone();
    let who: Vec<&str> = terms.iter().map(|(who, _)| *who).collect();
    assert_eq!(who, ["a", "b", "a"]);
    assert!(
        terms.windows(2).all(|w| w[0].1 < w[1].1),
        "fences rise: {terms:?}"
    );
    // B heard every leader while it ran: A's term, then its own.
    assert_eq!(heard.lock().expect("heard").as_slice(), ["a", "b"]);
}

/// Every term a leader loop leads ends with a call of its stopped-leading callback,
/// the term's fence and why: work that fails ends its term (resigned, so the
/// election has no leader until the loop campaigns again after its retry delay), a
/// lease lost under the term (the server restarted without it) and the loop's
/// shutdown each say so.
#[tokio::test(start_paused = true)]
async fn a_leader_loop_reports_each_term_end_and_resigns_a_failed_term() {
    use std::sync::Mutex;

    let memory = MemoryBackend::new();
    let options = distlock_core::LockOptions::new(Duration::from_secs(1));
    let client = LockClient::with_options(Arc::new(memory.clone()), options).expect("a client");
    let election = client.election("reported").expect("an election");
    let ended: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let leader = election
        .leader_loop("a")
        .expect("a leader loop")
        .with_retry(Duration::from_secs(2))
        .on_stopped_leading({
            let ended = ended.clone();
            move |fence, end| {
                let what = match end {
                    distlock_core::TermEnd::Failed(error) => format!("failed: {error}"),
                    distlock_core::TermEnd::Lost(_) => "lost".to_owned(),
                    distlock_core::TermEnd::Shutdown => "shutdown".to_owned(),
                    other => other.to_string(),
                };
                ended.lock().expect("ended").push((fence.get(), what));
            }
        });
    let health = leader.health();
    let terms = Arc::new(Mutex::new(0u32));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(leader.run(
        {
            let terms = terms.clone();
            move |term: distlock_core::LockGuard| {
                let terms = terms.clone();
                async move {
                    let first = {
                        let mut terms = terms.lock().expect("terms");
                        *terms += 1;
                        *terms == 1
                    };
                    if first {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        return Err("the disk is full");
                    }
                    term.lost().await;
                    Ok(())
                }
            }
        },
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The first term failed: reported, and resigned at once.
    assert!(!health.is_leading());
    assert_eq!(
        election.leader().await.expect("asked"),
        None,
        "the failed term was not resigned"
    );
    {
        let ended = ended.lock().expect("ended");
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(ended[0].1, "failed: the disk is full");
    }
    // After the retry delay the loop leads again; the server then loses the lease.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(health.is_leading(), "the loop did not lead again");
    memory.restart();
    let mut waited = Duration::ZERO;
    while ended.lock().expect("ended").len() < 2 {
        assert!(
            waited < Duration::from_secs(5),
            "the lost term was not reported"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    // It campaigns again and leads; shutting down reports the last term.
    while !health.is_leading() {
        assert!(
            waited < Duration::from_secs(10),
            "the loop did not lead a third time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    stop.send(()).expect("the loop runs");
    running.await.expect("joined").expect("shut down");
    let ended = ended.lock().expect("ended").clone();
    let reasons: Vec<&str> = ended.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(reasons, ["failed: the disk is full", "lost", "shutdown"]);
    assert!(
        ended.windows(2).all(|w| w[0].0 < w[1].0),
        "each term has a fence of its own, rising: {ended:?}"
    );
}

/// A leader loop started while the backend is down campaigns through the outage, and
/// leads once it is back.
#[tokio::test(start_paused = true)]
async fn a_leader_loop_campaigns_through_an_outage() {
    let memory = MemoryBackend::new();
    let leader = LockClient::new(Arc::new(memory.clone()))
        .election("outage")
        .and_then(|e| e.leader_loop("a"))
        .expect("a leader loop")
        .with_retry(Duration::from_millis(200));
    let health = leader.health();
    memory.stop();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(leader.run(
        |term| async move {
            term.lost().await;
        },
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!health.is_leading(), "led while the backend was down");
    assert!(!running.is_finished(), "the loop gave up during the outage");
    memory.start();
    let mut waited = Duration::ZERO;
    while !health.is_leading() {
        assert!(
            waited < Duration::from_secs(5),
            "no lead once the backend was back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    stop.send(()).expect("running");
    running.await.expect("joined").expect("shut down");
}

/// A resume token's string form reads back; anything else is a configuration error,
/// and its `Debug` form hides the owner token.
#[tokio::test]
async fn a_resume_token_reads_back_and_refuses_what_is_not_one() {
    let election = LockClient::new(Arc::new(MemoryBackend::new()))
        .election("tokens")
        .expect("an election");
    let term = election.campaign("a", WAIT).await.expect("elected");
    let token = term.resume_token();
    let written = token.to_string();
    let read: distlock_core::ResumeToken = written.parse().expect("reads back");
    assert_eq!(read, token);
    assert_eq!(read.fence(), term.fence());
    let owner = written.split_once('.').expect("two parts").1.to_owned();
    assert!(
        !format!("{token:?}").contains(&owner),
        "Debug shows the owner token: {token:?}"
    );
    for bad in [
        "",
        ".",
        "0.00000000000000000000000000000000",
        "-1.00000000000000000000000000000000",
        "7",
        "7.0000",
        "7.zz000000000000000000000000000000",
        "x.00000000000000000000000000000000",
    ] {
        let parsed = bad.parse::<distlock_core::ResumeToken>();
        assert_eq!(
            parsed.map_err(|e| e.kind()),
            Err(ErrorKind::Configuration),
            "{bad:?}"
        );
    }
    term.resign().await.expect("resigned");
}

/// A leader loop given the token of a live term leads that term at once, with its
/// fence, ahead of a candidate already waiting; its health hands out the token of
/// the term it leads; given the token of a term that is over, it leads a new term
/// once the election is vacant, as a campaign would.
#[tokio::test(start_paused = true)]
async fn a_leader_loop_resumes_a_live_term_and_takes_a_new_one_after_an_ended_one() {
    use std::sync::Mutex;

    use distlock_core::{LockOptions, ResumeToken};

    let backend = Arc::new(MemoryBackend::new());
    // A process leads, then stops as a crash stops it: no resignation, no renewal.
    let crashed = LockClient::with_options(
        backend.clone(),
        LockOptions::new(Duration::from_secs(30)).with_auto_renew(false),
    )
    .expect("a client");
    let term = crashed
        .election("resumed")
        .expect("an election")
        .campaign("a", WAIT)
        .await
        .expect("elected");
    let (fence, written) = (term.fence(), term.resume_token().to_string());
    std::mem::forget(term);
    // Another candidate waits for the term to end.
    let election = LockClient::new(backend.clone())
        .election("resumed")
        .expect("an election");
    let waiting = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("b", Duration::from_secs(60)).await }
    });

    let token: ResumeToken = written.parse().expect("a token");
    let restarted = election
        .leader_loop("a")
        .expect("a loop")
        .with_resume(token);
    let health = restarted.health();
    let led = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(restarted.run(
        {
            let led = led.clone();
            move |term| {
                let led = led.clone();
                async move {
                    led.lock().expect("led").push(term.fence());
                    term.lost().await;
                }
            }
        },
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *led.lock().expect("led"),
        vec![fence],
        "the live term resumed"
    );
    assert_eq!(health.resume_token(), Some(token));
    assert!(!waiting.is_finished(), "the waiting candidate was elected");
    stop.send(()).expect("the loop runs");
    running.await.expect("the loop").expect("shut down");
    assert_eq!(health.resume_token(), None);
    let second = waiting.await.expect("the candidate").expect("elected");
    let second_fence = second.fence();
    assert!(second_fence > fence);
    second.resign().await.expect("resigned");

    // The token of a term that is over resumes nothing: the loop leads a new term.
    let again = election
        .leader_loop("a")
        .expect("a loop")
        .with_resume(token);
    let again_led = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(again.run(
        {
            let again_led = again_led.clone();
            move |term| {
                let again_led = again_led.clone();
                async move {
                    again_led.lock().expect("led").push(term.fence());
                    term.lost().await;
                }
            }
        },
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fences = again_led.lock().expect("led").clone();
    assert!(
        matches!(fences.as_slice(), [f] if *f > second_fence),
        "after an ended term the loop led {fences:?}"
    );
    stop.send(()).expect("the loop runs");
    running.await.expect("the loop").expect("shut down");
}
