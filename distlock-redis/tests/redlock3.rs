//! The whole conformance suite against a Redlock over three independent Redis masters
//! in containers, quorum cases included: one master killed, paused beyond the TTL,
//! restarted empty, cut off from the client, and a majority cut off.

use distlock_redis::RedlockBackend;
use distlock_testservers::{redlock_target, RedisMasters};

distlock_conformance::conformance_main!(async {
    redlock_target(RedisMasters::start(3).await?, |url| async move {
        RedlockBackend::connect(&url).await
    })
    .await
});
