//! One reader for every backend's connection URL, and one policy for its options.
//!
//! `scheme://[user[:password]@]host[:port][,host[:port]...][/path][?name=value&...]`
//!
//! - every part is percent-decoded, never form-decoded: a `+` stays a `+`, and a
//!   reserved character (`@`, `:`, `/`, `?`, `#`, `&`, `=`, `%`) is written `%XX`
//!   where it belongs to a value; a `%` not followed by two hex digits stays as it is;
//! - a host without a port gets the backend's default port; an IPv6 address is
//!   written in brackets (`[::1]:6379`); a host listed twice is refused;
//! - a fragment (`#...`) is refused, since nothing would read it;
//! - each option is read at most once ([`Options`]); whatever no reader asked for is a
//!   configuration error that names it, lists the backend's options and suggests the
//!   closest one.

use std::fmt;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use super::config_error;
use crate::error::Result;

/// One server's address: a host name or IP address, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Endpoint {
    /// The host name or IP address (an IPv6 address without its brackets).
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Endpoint {
    /// `host` and `port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Endpoint {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A connection URL, cut into its decoded parts (see [`ConnectionUrl::parse`]).
///
/// `Debug` never shows the password; [`redacted`](Self::redacted) is the URL as logs
/// and errors may show it.
#[derive(Clone)]
pub struct ConnectionUrl {
    backend: &'static str,
    /// The scheme, as written (one of those the backend serves).
    pub scheme: String,
    /// The user name, decoded; `None` when the URL has no user part or an empty one.
    pub user: Option<String>,
    /// The password, decoded; `None` when the URL has none.
    pub password: Option<String>,
    /// The servers, in the URL's order, each with its port or the default one.
    pub endpoints: Vec<Endpoint>,
    /// The path, decoded, with its leading `/`; empty when the URL has none.
    pub path: String,
    /// The options, to be read through [`options`](Self::options).
    query: Vec<(String, String)>,
}

impl fmt::Debug for ConnectionUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Decodes one part of a URL, which must be UTF-8 once decoded.
fn decode(backend: &'static str, what: &str, part: &str) -> Result<String> {
    percent_decode_str(part)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            config_error(
                backend,
                format!("the URL's {what} is not UTF-8 once decoded"),
            )
        })
}

impl ConnectionUrl {
    /// Reads `url` for `backend`, which serves `schemes` and listens on
    /// `default_port` unless the URL names another. Errors are
    /// [`ErrorKind::Configuration`](crate::ErrorKind::Configuration), name what is
    /// wrong, and never echo the password.
    pub fn parse(
        backend: &'static str,
        url: &str,
        schemes: &[&str],
        default_port: u16,
    ) -> Result<Self> {
        let error = |message: String| config_error(backend, message);
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(error(format!(
                "not a URL: expected {}://host[:port]",
                schemes.first().copied().unwrap_or(backend)
            )));
        };
        if !schemes.contains(&scheme) {
            return Err(error(format!(
                "the scheme {scheme:?} is not the {backend} backend's (it serves {})",
                schemes
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, _)) => (rest, true),
            None => (rest, false),
        };
        if fragment {
            return Err(error(
                "the URL has a fragment (#...), which nothing reads: write a # that belongs \
                 to a value as %23"
                    .into(),
            ));
        }
        // The authority ends at the first `/` or `?`: a password may hold a raw `@`
        // (the last one ends the user part), `&`, `+` or `%`, but not `/`, `?` or `#`.
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => {
                let (user, password) = match info.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (info, None),
                };
                let user = decode(backend, "user", user)?;
                let password = password
                    .map(|p| decode(backend, "password", p))
                    .transpose()?;
                ((!user.is_empty()).then_some(user), password)
            }
        };
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for host in hosts.split(',') {
            let endpoint = endpoint(backend, host, default_port)?;
            if endpoints
                .iter()
                .any(|e| e.host.eq_ignore_ascii_case(&endpoint.host) && e.port == endpoint.port)
            {
                return Err(error(format!(
                    "the server {endpoint} is listed twice: each must be a server of its own"
                )));
            }
            endpoints.push(endpoint);
        }
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let path = decode(backend, "path", path)?;
        let mut pairs = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            pairs.push((
                decode(backend, "option name", name)?,
                decode(backend, "option value", value)?,
            ));
        }
        Ok(ConnectionUrl {
            backend,
            scheme: scheme.to_owned(),
            user,
            password,
            endpoints,
            path,
            query: pairs,
        })
    }

    /// The options, to be read one by one; [`Options::finish`] refuses any left.
    pub fn options(&self) -> Options {
        Options {
            backend: self.backend,
            pairs: self
                .query
                .iter()
                .map(|(name, value)| (name.clone(), value.clone(), false))
                .collect(),
            known: Vec::new(),
        }
    }

    /// The URL as logs and errors may show it: the password (and the value of any
    /// option named like a secret) replaced by `***`, every part encoded again.
    pub fn redacted(&self) -> String {
        let mut shown = format!("{}://", self.scheme);
        if self.user.is_some() || self.password.is_some() {
            shown.push_str(&encode(self.user.as_deref().unwrap_or("")));
            if self.password.is_some() {
                shown.push_str(":***");
            }
            shown.push('@');
        }
        let hosts: Vec<String> = self.endpoints.iter().map(Endpoint::to_string).collect();
        shown.push_str(&hosts.join(","));
        shown.push_str(&percent_encoding::utf8_percent_encode(&self.path, PATH).to_string());
        for (i, (name, value)) in self.query.iter().enumerate() {
            shown.push(if i == 0 { '?' } else { '&' });
            shown.push_str(&encode(name));
            shown.push('=');
            if is_secret_name(name) {
                shown.push_str("***");
            } else {
                shown.push_str(&encode(value));
            }
        }
        shown
    }
}

/// What [`encode`] leaves as it is: letters, digits and `-._~`.
const VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What a path keeps as it is: [`VALUE`]'s, and `/`.
const PATH: &percent_encoding::AsciiSet = &VALUE.remove(b'/');

/// `text` percent-encoded for any part of a URL.
pub fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, VALUE).to_string()
}

/// Whether an option named `name` holds a secret, whose value no log may show.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "pass",
        "token",
        "secret",
        "sslpassword",
    ]
    .contains(&name.as_str())
}

fn endpoint(backend: &'static str, host: &str, default_port: u16) -> Result<Endpoint> {
    let error = |message: String| config_error(backend, message);
    if host.is_empty() {
        return Err(error(
            "the URL names no host (or an empty one in its list of hosts)".into(),
        ));
    }
    let (name, port) = if let Some(v6) = host.strip_prefix('[') {
        let (name, after) = v6
            .split_once(']')
            .ok_or_else(|| error(format!("the host {host:?} opens a [ it does not close")))?;
        match after {
            "" => (name, None),
            port => match port.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return Err(error(format!("the host {host:?} is not [address]:port"))),
            },
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() || name.contains(['@', ' ']) {
        return Err(error(format!(
            "the host {host:?} is not a host name or address"
        )));
    }
    let port = match port {
        None => default_port,
        Some(port) => port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            error(format!(
                "the port of {host:?} is not a number from 1 to 65535"
            ))
        })?,
    };
    Ok(Endpoint::new(decode(backend, "host", name)?, port))
}

/// A URL's options, read one by one by the backend that knows them: each reader names
/// an option once (present or not), so that [`finish`](Self::finish) can list every
/// option the backend has when it refuses one it does not.
#[derive(Debug)]
pub struct Options {
    backend: &'static str,
    /// Each option's name and value, and whether a reader took it.
    pairs: Vec<(String, String, bool)>,
    /// The names readers asked for, in order.
    known: Vec<&'static str>,
}

impl Options {
    /// The value of `name`, if given; given twice is an error.
    pub fn take(&mut self, name: &'static str) -> Result<Option<String>> {
        if !self.known.contains(&name) {
            self.known.push(name);
        }
        let mut found = None;
        for (n, value, taken) in &mut self.pairs {
            if n == name {
                if found.is_some() {
                    return Err(config_error(
                        self.backend,
                        format!("the option {name} is given twice"),
                    ));
                }
                *taken = true;
                found = Some(value.clone());
            }
        }
        Ok(found)
    }

    /// The value of `name`, or of `old`, a name it had before (still read; giving
    /// both is an error).
    pub fn take_renamed(
        &mut self,
        name: &'static str,
        old: &'static str,
    ) -> Result<Option<String>> {
        let new = self.take(name)?;
        let before = self.take(old)?;
        self.known.retain(|n| *n != old);
        match (new, before) {
            (Some(_), Some(_)) => Err(config_error(
                self.backend,
                format!("{old} is the old name of {name}: give one of them"),
            )),
            (new, before) => Ok(new.or(before)),
        }
    }

    /// `name` as a positive number of milliseconds.
    pub fn millis(&mut self, name: &'static str) -> Result<Option<Duration>> {
        let backend = self.backend;
        self.take(name)?
            .map(|v| super::positive_millis(backend, name, &v))
            .transpose()
    }

    /// `name` as `true` or `false` (also `on`/`off`, `1`/`0`).
    pub fn flag(&mut self, name: &'static str) -> Result<Option<bool>> {
        let backend = self.backend;
        self.take(name)?
            .map(|v| match v.as_str() {
                "true" | "on" | "1" => Ok(true),
                "false" | "off" | "0" => Ok(false),
                _ => Err(config_error(
                    backend,
                    format!("{name} must be true or false, not {v:?}"),
                )),
            })
            .transpose()
    }

    /// `name` as a whole number (of the type asked for), described as `what` when it
    /// is not one.
    pub fn number<T: std::str::FromStr>(
        &mut self,
        name: &'static str,
        what: &str,
    ) -> Result<Option<T>> {
        let backend = self.backend;
        self.take(name)?
            .map(|v| {
                v.parse::<T>()
                    .map_err(|_| config_error(backend, format!("{name} must be {what}, not {v:?}")))
            })
            .transpose()
    }

    /// Every option not taken yet whose name is one of `names`: options a backend
    /// hands to its driver unread, each named in its docs.
    pub fn pass_on(&mut self, names: &[&'static str]) -> Vec<(String, String)> {
        let mut passed = Vec::new();
        for name in names {
            if !self.known.contains(name) {
                self.known.push(name);
            }
        }
        for (n, value, taken) in &mut self.pairs {
            if !*taken && names.contains(&n.as_str()) {
                *taken = true;
                passed.push((n.clone(), value.clone()));
            }
        }
        passed
    }

    /// The names readers asked for so far.
    pub fn known(&self) -> &[&'static str] {
        &self.known
    }

    /// Refuses an option no reader took: a configuration error naming it, suggesting
    /// the closest option's name where one is close, and listing them all.
    pub fn finish(self) -> Result<()> {
        let Some((name, _, _)) = self.pairs.iter().find(|(_, _, taken)| !taken) else {
            return Ok(());
        };
        let closest = self
            .known
            .iter()
            .map(|k| (distance(name, k), *k))
            .filter(|(d, k)| *d <= (k.len() / 3).max(2))
            .min();
        let suggestion = match closest {
            Some((_, k)) => format!(" (did you mean {k}?)"),
            None => String::new(),
        };
        let mut known = self.known.clone();
        known.sort_unstable();
        Err(config_error(
            self.backend,
            format!(
                "unknown option {name:?} in the URL{suggestion}; the {} backend's options are: {}",
                self.backend,
                known.join(", ")
            ),
        ))
    }
}

/// The edit distance between `a` and `b` (insertions, deletions, substitutions and
/// swaps of neighbours), for suggesting an option's name.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn parse(url: &str) -> Result<ConnectionUrl> {
        ConnectionUrl::parse("test", url, &["test", "tests"], 1234)
    }

    #[test]
    fn reads_every_part_percent_decoded_with_default_ports() {
        let url = parse("test://app%2Bx:p%2Bw%26d%25%40x@a,b:99,[::1],[fe80::1]:7/root/p%20q?prefix=a+b&n=%26&flag")
            .expect("valid");
        assert_eq!(url.user.as_deref(), Some("app+x"));
        assert_eq!(url.password.as_deref(), Some("p+w&d%@x"));
        assert_eq!(
            url.endpoints,
            [
                Endpoint::new("a", 1234),
                Endpoint::new("b", 99),
                Endpoint::new("::1", 1234),
                Endpoint::new("fe80::1", 7)
            ]
        );
        assert_eq!(url.path, "/root/p q");
        let mut options = url.options();
        assert_eq!(
            options.take("prefix").expect("once").as_deref(),
            Some("a+b")
        );
        assert_eq!(options.take("n").expect("once").as_deref(), Some("&"));
        assert_eq!(options.take("flag").expect("once").as_deref(), Some(""));
        options.finish().expect("all taken");
        let shown = format!("{url:?}");
        assert!(
            !shown.contains("p+w") && !shown.contains("p%2Bw"),
            "{shown}"
        );
        assert!(
            shown.starts_with("test://app%2Bx:***@a:1234,b:99,[::1]:1234"),
            "{shown}"
        );
    }

    #[test]
    fn a_raw_plus_at_and_percent_in_a_password_stay_as_written() {
        let url = parse("test://u:p+w%d@x@h").expect("valid");
        assert_eq!(url.password.as_deref(), Some("p+w%d@x"));
        assert_eq!(url.endpoints, [Endpoint::new("h", 1234)]);
        let url = parse("test://u:p&w@h/x?a=1").expect("valid");
        assert_eq!(url.password.as_deref(), Some("p&w"));
        assert_eq!(url.path, "/x");
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (bad, says) in [
            ("h:1", "not a URL"),
            ("other://h", "tests://"),
            ("test://:s3cret@", "no host"),
            ("test://:s3cret@a,,b", "no host"),
            ("test://:s3cret@a:0", "1 to 65535"),
            ("test://:s3cret@a:x", "1 to 65535"),
            ("test://:s3cret@a:70000", "1 to 65535"),
            ("test://:s3cret@a,A", "listed twice"),
            ("test://:s3cret@[::1", "does not close"),
            ("test://:s3cret@h#frag", "fragment"),
            ("test://:s3cret@h?a=%FF", "UTF-8"),
        ] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{bad}: {err}");
        }
    }

    #[test]
    fn an_unknown_option_is_named_with_the_closest_and_every_valid_one() {
        let url = parse("test://h?tabel=svc&schema=x").expect("valid");
        let mut options = url.options();
        assert_eq!(options.take("schema").expect("once").as_deref(), Some("x"));
        assert!(options.take("table").expect("once").is_none());
        let _ = options.millis("response_timeout_ms").expect("absent");
        let err = options.finish().expect_err("tabel");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        let text = err.to_string();
        assert!(text.contains("\"tabel\""), "{text}");
        assert!(text.contains("did you mean table?"), "{text}");
        assert!(
            text.contains("response_timeout_ms, schema, table"),
            "{text}"
        );
        // Nothing close: no suggestion, still the list.
        let url = parse("test://h?zzzzzz=1").expect("valid");
        let mut options = url.options();
        let _ = options.take("table");
        let text = options.finish().expect_err("zzzzzz").to_string();
        assert!(!text.contains("did you mean"), "{text}");
        assert!(text.contains("options are: table"), "{text}");
    }

    #[test]
    fn options_are_read_once_and_typed() {
        let url = parse("test://h?a=1&a=2&ms=0&on=yes&old=5&n=x").expect("valid");
        let mut options = url.options();
        assert!(options.take("a").is_err());
        assert!(options.millis("ms").is_err());
        assert!(options.flag("on").is_err());
        assert_eq!(
            options
                .take_renamed("new", "old")
                .expect("renamed")
                .as_deref(),
            Some("5")
        );
        assert!(!options.known().contains(&"old"));
        assert!(options.number::<u32>("n", "a whole number").is_err());
        let url = parse("test://h?protocol=resp3&x=1").expect("valid");
        let mut options = url.options();
        assert_eq!(
            options.pass_on(&["protocol"]),
            [("protocol".to_owned(), "resp3".to_owned())]
        );
        assert!(options.finish().is_err());
    }

    #[test]
    fn distance_counts_edits_and_swaps() {
        assert_eq!(distance("tabel", "table"), 1);
        assert_eq!(distance("timeout_ms", "timeout_ms"), 0);
        assert_eq!(distance("prefx", "prefix"), 1);
        assert_eq!(distance("abc", "xyz"), 3);
    }
}
