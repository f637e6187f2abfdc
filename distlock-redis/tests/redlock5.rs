//! The whole conformance suite against a Redlock over five independent Redis masters
//! in containers, quorum cases included: two masters killed, paused beyond the TTL or
//! cut off from the client, one restarted empty, and a majority cut off.

use distlock_redis::RedlockBackend;
use distlock_testservers::{redlock_target, RedisMasters};

distlock_conformance::conformance_main!(async {
    redlock_target(RedisMasters::start(5).await?, |url| async move {
        RedlockBackend::connect(&url).await
    })
    .await
});
