//! The fenced-store suite through PgBouncer in transaction pooling mode, with the
//! backend in its PgBouncer mode: `PostgresStore`'s statements as simple-protocol
//! batches, the stale-fence error coming back through the pooler.

use distlock_postgres::fenced::PostgresStore;
use distlock_postgres::PostgresBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::PgBouncer,
    |url| async move { PostgresStore::new(&PostgresBackend::connect(&url).await?).await }
));
