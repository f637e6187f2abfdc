//! Keeping credentials out of logs, errors and `Debug` output.

/// `url` with its password (and any query value named like a secret) replaced by
/// `***`, for logs, errors and `Debug` output. A string that is not a URL comes back
/// as a placeholder, since it may hold anything.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return "<unparseable url>".to_owned();
    };
    if parsed.password().is_some() {
        // Setting a password fails only on URLs that cannot have one.
        let _ = parsed.set_password(Some("***"));
    }
    let secret = |k: &str| crate::support::is_secret_name(k);
    if parsed.query_pairs().any(|(k, _)| secret(&k)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret(&k) {
                    "***".to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_survive() {
        let cases = [
            ("redis://:hunter2@host:6379/0", "redis://:***@host:6379/0"),
            (
                "postgres://app:hunter2@db/locks?sslmode=require",
                "postgres://app:***@db/locks?sslmode=require",
            ),
            (
                "etcd://h:2379?password=hunter2&prefix=x",
                "etcd://h:2379?password=***&prefix=x",
            ),
            ("redis://host", "redis://host"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_url(input), want);
        }
        assert!(!redact_url("not a url hunter2").contains("hunter2"));
    }
}
