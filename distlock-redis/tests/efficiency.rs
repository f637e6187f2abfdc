//! The whole conformance suite on the efficiency lock (`LockOptions::with_fenced(false)`)
//! against a real Redis, with its fault controls: every grant an unfenced `SET NX`,
//! every case but the fencing ones (which do not apply, and say so).

use distlock_conformance::Target;
use distlock_redis::RedisBackend;

distlock_conformance::conformance_main!(async {
    distlock_testservers::target(&distlock_testservers::Redis, |url| async move {
        RedisBackend::connect(&url).await
    })
    .await
    .map(Target::unfenced)
});
