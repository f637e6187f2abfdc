//! The suite over TLS: a MariaDB server of a fresh test CA (from the local image) that
//! takes TLS connections only (`require_secure_transport`), reached by a URL that
//! trusts that CA and checks the host (`ca_file`, so `ssl-mode=VERIFY_IDENTITY`). The
//! cases that need no control over the server and no links run (the fault and
//! partition cases run on plain connections, in `conformance.rs`).

use distlock_mysql::MySqlBackend;

distlock_conformance::conformance_main!(distlock_testservers::tls_target(
    &distlock_testservers::MariaDb,
    |url| async move { MySqlBackend::connect(&url).await }
));
