//! The whole conformance suite against a real PostgreSQL: a container started here, with its
//! fault controls, round-trip meter and wrong credentials, or the server
//! `DISTLOCK_POSTGRES_URL` names (no fault cases).

use distlock_postgres::PostgresBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Postgres,
    |url| async move { PostgresBackend::connect(&url).await }
));
