//! The fenced-store suite on a real PostgreSQL: `PostgresStore`, whose statements use
//! the same check as `FencedTable`'s (tested on a user's table in `postgres.rs`).

use distlock_postgres::fenced::PostgresStore;
use distlock_postgres::PostgresBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::Postgres,
    |url| async move { PostgresStore::new(&PostgresBackend::connect(&url).await?).await }
));
