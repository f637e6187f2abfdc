//! The whole conformance suite against a Redis Cluster of three masters in containers
//! (`redis-cluster://`), the fault cases on every member at once. A cluster client
//! follows the members' redirections to their own addresses, so no proxy can sit in
//! between: the round-trip and partition cases do not run here.

use distlock_redis::RedisBackend;
use distlock_testservers::{cluster_target, RedisCluster};

distlock_conformance::conformance_main!(async {
    cluster_target(RedisCluster::start(3).await?, |url| async move {
        RedisBackend::connect(&url).await
    })
    .await
});
