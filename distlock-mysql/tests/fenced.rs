//! The fenced-store suite on a real MariaDB: `MySqlStore`.

use distlock_mysql::fenced::MySqlStore;
use distlock_mysql::MySqlBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::MariaDb,
    |url| async move { MySqlStore::new(&MySqlBackend::connect(&url).await?).await }
));
