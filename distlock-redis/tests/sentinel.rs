//! The whole conformance suite against a Redis master with two replicas behind three
//! Sentinels in containers (`redis-sentinel://`), the fault cases on every server and
//! Sentinel at once. The client reaches the master at the address the Sentinels name,
//! so no proxy can sit in between: the round-trip and partition cases do not run
//! here. A failover is `tests/sentinel_failover.rs`'s.

use distlock_redis::RedisBackend;
use distlock_testservers::RedisSentinel;

distlock_conformance::conformance_main!(async {
    RedisSentinel::start(2)
        .await?
        .target(|url| async move { RedisBackend::connect(&url).await })
        .await
});
