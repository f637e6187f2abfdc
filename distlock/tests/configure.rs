//! The configuration guide's three ways to configure a backend compile (they are
//! `tests/readme/configure.rs`, built here; `tests/docs.rs` checks that
//! `distlock/guides/configuration.md` shows them word for word), and a setting in parts
//! connects.

mod configure {
    include!("readme/configure.rs");
}

/// The setting in parts, as a configuration file spells it, connects as its URL does:
/// a password as written, the backend's options checked by the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_in_parts_connects_as_its_url_does() {
    use distlock::{BackendConfig, ErrorKind, LockClient};
    use distlock_conformance::adoption::PASSWORD;
    use std::time::Duration;

    let server = distlock_testservers::ServerHandle::start_with_password(
        &distlock_testservers::Postgres,
        PASSWORD,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let setting = |options: &str| {
        format!(
            r#"{{ "backend": "postgres", "hosts": ["127.0.0.1:{}"], "user": "postgres",
                 "password": {password}, "path": "postgres", "options": {options} }}"#,
            server.host_port(),
            password = serde_json::to_string(PASSWORD).expect("json"),
        )
    };
    let config: BackendConfig = serde_json::from_str(&setting(
        r#"{ "table": "parts_locks", "response_timeout_ms": 2000 }"#,
    ))
    .expect("the setting");
    assert!(!format!("{config:?}").contains(PASSWORD));
    let client = LockClient::new(config.connect().await.expect("connect"));
    let fence = client
        .with_lock(
            "parts",
            Duration::from_secs(5),
            |fence| async move { fence },
        )
        .await
        .expect("lock")
        .into_output();
    assert!(fence.get() > 0);

    // A misspelt option is the backend's configuration error, naming it.
    let config: BackendConfig =
        serde_json::from_str(&setting(r#"{ "tabel": "parts_locks" }"#)).expect("the setting");
    let err = config.connect().await.expect_err("misspelt");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(err.to_string().contains("did you mean table"), "{err}");
    assert!(!format!("{err} {err:?}").contains(PASSWORD), "{err:?}");

    // A misspelt field is refused as the file is read, naming the fields.
    let err = serde_json::from_str::<BackendConfig>(r#"{ "backend": "postgres", "hots": ["h"] }"#)
        .expect_err("misspelt field");
    let text = err.to_string();
    assert!(text.contains("hots") && text.contains("hosts"), "{text}");
}
