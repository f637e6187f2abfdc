//! The suite over TLS: a server of a fresh test CA (from the local image), reached by
//! a URL that trusts that CA. The cases that need no control over the server and no
//! links run (the fault and partition cases run on plain connections, in
//! `conformance.rs`).

use distlock_redis::RedisBackend;

distlock_conformance::conformance_main!(distlock_testservers::tls_target(
    &distlock_testservers::Redis,
    |url| async move { RedisBackend::connect(&url).await }
));
