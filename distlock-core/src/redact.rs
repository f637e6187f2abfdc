//! Keeping credentials out of logs, errors and `Debug` output.

/// `url` with its password (and any query value named like a secret) replaced by
/// `***`, for logs, errors and `Debug` output. A string that is not a URL comes back
/// as a placeholder, since it may hold anything.
///
/// The URL is cut up as [`ConnectionUrl`](crate::backend::ConnectionUrl) reads it:
/// the authority ends at the first `/` or `?`, and its last `@` ends the user part.
/// Where that reading is in doubt (a `#`, or an `@` past the authority, which may be
/// a password holding a raw `/` or `?`), everything after the scheme is hidden.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<unparseable url>".to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok || rest.contains('#') || tail.contains('@') {
        let scheme = if scheme_ok { scheme } else { "?" };
        return format!("{scheme}://***");
    }
    let mut shown = format!("{scheme}://");
    if let Some((userinfo, hosts)) = authority.rsplit_once('@') {
        match userinfo.split_once(':') {
            Some((user, _)) => {
                shown.push_str(user);
                shown.push_str(":***");
            }
            None => shown.push_str(userinfo),
        }
        shown.push('@');
        shown.push_str(hosts);
    } else {
        shown.push_str(authority);
    }
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    shown.push_str(path);
    if let Some(query) = query {
        shown.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret(name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push_str(&pairs.join("&"));
    }
    shown
}

/// Whether a query option's name, percent-decoded, names a secret.
fn is_secret(name: &str) -> bool {
    let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    crate::support::is_secret_name(&decoded)
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
        // Readings in doubt hide all but the scheme: a password with a raw `/`, `?`
        // or `#`, a fragment, an encoded secret name.
        for input in [
            "redis://u:hun/ter2@host",
            "redis://u:hun?ter2@host",
            "redis://u:hun#ter2@host",
            "redis://host#hunter2",
        ] {
            assert_eq!(redact_url(input), "redis://***", "{input}");
        }
        assert_eq!(
            redact_url("etcd://h?pass%77ord=hunter2"),
            "etcd://h?pass%77ord=***"
        );
        assert_eq!(
            redact_url("redis://u:p@ss:hunter2@host/1?db=2"),
            "redis://u:***@host/1?db=2"
        );
        assert_eq!(redact_url("hun:ter2://x"), "?://***");
    }
}
