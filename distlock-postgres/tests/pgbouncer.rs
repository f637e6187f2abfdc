//! The whole conformance suite through PgBouncer in transaction pooling mode (Debian's
//! PgBouncer 1.18, in front of PostgreSQL, from the local image), with the backend in
//! its PgBouncer mode (`pgbouncer=true`, which turns notifications off): fault
//! controls, round-trip meter and wrong credentials included.

use distlock_postgres::PostgresBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::PgBouncer,
    |url| async move { PostgresBackend::connect(&url).await }
));
