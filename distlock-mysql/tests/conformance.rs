//! The whole conformance suite against a real MariaDB: a container started here, with
//! its fault controls, round-trip meter and wrong credentials, or the server
//! `DISTLOCK_MARIADB_URL` names (no fault cases).

use distlock_mysql::MySqlBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::MariaDb,
    |url| async move { MySqlBackend::connect(&url).await }
));
