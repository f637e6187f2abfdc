//! The whole conformance suite on the efficiency lock (`LockOptions::with_fenced(false)`)
//! against a Redlock over three Redis masters, quorum cases included: every grant an
//! unfenced `SET NX` on each master, every case but the fencing ones (which do not
//! apply, and say so).

use distlock_conformance::Target;
use distlock_redis::RedlockBackend;
use distlock_testservers::{redlock_target, RedisMasters};

distlock_conformance::conformance_main!(async {
    redlock_target(RedisMasters::start(3).await?, |url| async move {
        RedlockBackend::connect(&url).await
    })
    .await
    .map(Target::unfenced)
});
