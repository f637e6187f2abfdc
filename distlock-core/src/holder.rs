//! [`Holder`]: who holds a lease, stored with it for operators to read.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use crate::error::{Error, ErrorKind, Result};
use crate::support::is_secret_name;

/// The longest holder identity, in bytes.
pub const MAX_HOLDER_ID: usize = 255;

/// The longest holder payload, in bytes.
pub const MAX_HOLDER_PAYLOAD: usize = 1024;

/// Who holds a lease: an identity (by default this host's name and this process's id,
/// `"<host>:<pid>"`) and an optional small payload (a build, a pod, a job run). A
/// backend that keeps holders
/// ([`Capabilities::holder_records`](crate::backend::Capabilities::holder_records))
/// stores it with every lease and permit grant, with the grant's time, so that
/// [`inspect`](crate::LockBackend::inspect), `distlock inspect` and `distlock list` can
/// answer an operator's first question in an incident: who has it, since when.
///
/// Set one per client with [`LockOptions::with_holder`](crate::LockOptions::with_holder).
/// Anyone who can read the lock's store can read it: it is checked not to carry a URL
/// with a password, and distlock never puts its own connection's credentials in it,
/// but nothing else secret belongs there either.
///
/// ```
/// use distlock_core::Holder;
///
/// let holder = Holder::new("billing-7")?.with_payload("release 2026.11.3")?;
/// assert_eq!(holder.id(), "billing-7");
/// assert_eq!(holder.payload(), Some("release 2026.11.3"));
/// assert!(Holder::new("").is_err());
/// assert!(Holder::new("api").and_then(|h| h.with_payload("redis://app:s3cret@cache")).is_err());
/// // The default names this process.
/// assert!(Holder::this_process().id().ends_with(&format!(":{}", std::process::id())));
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder(Arc<Stored>);

#[derive(PartialEq, Eq, Hash)]
struct Stored {
    /// The identity, then a newline and the payload where there is one: the one string
    /// backends store.
    encoded: String,
    /// Where the identity ends in `encoded`.
    id_len: usize,
}

impl Holder {
    /// A holder named `id`: an [`ErrorKind::Configuration`] error unless it is 1 to
    /// [`MAX_HOLDER_ID`] bytes without control characters, and carries no URL with a
    /// password.
    pub fn new(id: impl Into<String>) -> Result<Holder> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_HOLDER_ID || id.chars().any(char::is_control) {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "a holder's identity is 1 to {MAX_HOLDER_ID} bytes without control characters ({} bytes given)",
                    id.len()
                ),
            ));
        }
        refuse_credentials(&id, "identity")?;
        let id_len = id.len();
        Ok(Holder(Arc::new(Stored {
            encoded: id,
            id_len,
        })))
    }

    /// This process: `"<host>:<pid>"`, the host's name read from `HOSTNAME`, the
    /// kernel or `COMPUTERNAME`, else `"localhost"`, once per process (a child forked
    /// without `exec` names its parent). The default holder of every client.
    pub fn this_process() -> Holder {
        static THIS: OnceLock<Holder> = OnceLock::new();
        THIS.get_or_init(|| {
            // A host name has no control characters (host_name) and at most 200
            // bytes here, so this holder is a valid one.
            let mut host = host_name();
            while host.len() > 200 {
                host.pop();
            }
            let encoded = format!("{host}:{}", std::process::id());
            Holder(Arc::new(Stored {
                id_len: encoded.len(),
                encoded,
            }))
        })
        .clone()
    }

    /// This holder carrying `payload`: an [`ErrorKind::Configuration`] error when it
    /// is longer than [`MAX_HOLDER_PAYLOAD`] bytes, holds a NUL character, or carries a
    /// URL with a password.
    pub fn with_payload(&self, payload: impl Into<String>) -> Result<Holder> {
        let payload = payload.into();
        if payload.len() > MAX_HOLDER_PAYLOAD || payload.contains('\0') {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "a holder's payload is at most {MAX_HOLDER_PAYLOAD} bytes without NUL characters ({} bytes given)",
                    payload.len()
                ),
            ));
        }
        refuse_credentials(&payload, "payload")?;
        let id = self.id();
        Ok(Holder(Arc::new(Stored {
            encoded: format!("{id}\n{payload}"),
            id_len: id.len(),
        })))
    }

    /// The identity.
    pub fn id(&self) -> &str {
        &self.0.encoded[..self.0.id_len]
    }

    /// The payload, if any.
    pub fn payload(&self) -> Option<&str> {
        self.0.encoded.get(self.0.id_len + 1..)
    }

    /// The one string a backend stores: the identity, then a newline and the payload
    /// where there is one. [`Holder::decode`] reads it back.
    pub fn encoded(&self) -> &str {
        &self.0.encoded
    }

    /// The holder a backend stored as [`encoded`](Self::encoded); `None` when `stored`
    /// is not one (empty, say, for a lease granted before holders were kept).
    pub fn decode(stored: &str) -> Option<Holder> {
        match stored.split_once('\n') {
            None => Holder::new(stored).ok(),
            Some((id, payload)) => Holder::new(id).ok()?.with_payload(payload).ok(),
        }
    }
}

impl Default for Holder {
    /// [`Holder::this_process`].
    fn default() -> Self {
        Holder::this_process()
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holder")
            .field("id", &self.id())
            .field("payload", &self.payload())
            .finish()
    }
}

impl fmt::Display for Holder {
    /// The identity, and the payload in brackets where there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.payload() {
            Some(payload) => write!(f, "{} [{payload}]", self.id()),
            None => f.write_str(self.id()),
        }
    }
}

/// A record's field with the holder tagged on, for a backend that keeps a grant as
/// one text record (`"<field>:<rest>"`): the field becomes
/// `"<field>/<granted ms>/<holder's length>"`, and the holder goes in front of the
/// rest. [`untag_holder`] reads it back, and a record written without a holder alike.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use distlock_core::backend::{tag_holder, untag_holder};
/// use distlock_core::Holder;
///
/// let holder = Holder::new("api-1:42")?;
/// let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
/// let (field, front) = tag_holder("1", &holder, at);
/// let record = format!("3:{field}:{front}10.0.0.7:80"); // count, flag, then the value
/// let (count, rest) = record.split_once(':').expect("count");
/// let (flag, rest) = rest.split_once(':').expect("flag");
/// let (flag, read, granted_at, value) = untag_holder(flag, rest).expect("well formed");
/// assert_eq!((count, flag, value), ("3", "1", "10.0.0.7:80"));
/// assert_eq!((read, granted_at), (Some(holder), Some(at)));
/// // A record of an earlier version, without a holder:
/// assert_eq!(untag_holder("1", "10.0.0.7:80"), Some(("1", None, None, "10.0.0.7:80")));
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub fn tag_holder<'h>(
    field: &str,
    holder: &'h Holder,
    granted_at: SystemTime,
) -> (String, &'h str) {
    let ms = granted_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let encoded = holder.encoded();
    (format!("{field}/{ms}/{}", encoded.len()), encoded)
}

/// Reads a field and the rest after it as [`tag_holder`] wrote them: the field, the
/// holder and its grant time (`None`s where none was tagged on, or it does not read
/// back), and the rest after the holder. `None` for a tag that is not well formed.
pub fn untag_holder<'a>(
    field: &'a str,
    rest: &'a str,
) -> Option<(&'a str, Option<Holder>, Option<SystemTime>, &'a str)> {
    let mut parts = field.splitn(3, '/');
    let (Some(head), Some(ms), Some(length)) = (parts.next(), parts.next(), parts.next()) else {
        return Some((field, None, None, rest));
    };
    let length: usize = length.parse().ok()?;
    let ms: u64 = ms.parse().ok()?;
    let (stored, after) = (rest.get(..length)?, rest.get(length..)?);
    match Holder::decode(stored) {
        Some(holder) => Some((
            head,
            Some(holder),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            after,
        )),
        None => Some((head, None, None, after)),
    }
}

/// An error when `text` carries a URL with a password, which would land in the
/// lock's store for anyone to read.
fn refuse_credentials(text: &str, what: &str) -> Result<()> {
    let carries = text
        .split(|c: char| c.is_whitespace() || c == '"' || c == '\'' || c == ',')
        .filter_map(|word| word.split_once("://").map(|(_, rest)| rest))
        .any(|rest| {
            // A user part with a password (`user:password@`), or a query value named
            // like a secret (`?token=…`).
            let user_part = rest.rfind('@').is_some_and(|at| rest[..at].contains(':'));
            let query = rest.split('#').next().and_then(|r| r.split_once('?'));
            let secret_query = query.is_some_and(|(_, query)| {
                query.split('&').any(|pair| {
                    pair.split_once('=')
                        .is_some_and(|(name, value)| is_secret_name(name) && !value.is_empty())
                })
            });
            user_part || secret_query
        });
    if carries {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("a holder's {what} is stored where anyone who reads the locks can see it, and this one carries a URL with a password"),
        ));
    }
    Ok(())
}

/// This host's name, from the environment or the kernel.
fn host_name() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    [
        std::env::var("HOSTNAME").ok(),
        read("/proc/sys/kernel/hostname"),
        read("/etc/hostname"),
        std::env::var("COMPUTERNAME").ok(),
    ]
    .into_iter()
    .flatten()
    .map(|name| name.trim().to_owned())
    .find(|name| !name.is_empty() && !name.chars().any(char::is_control))
    .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(feature = "serde")]
mod serde_form {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Holder;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Form {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload: Option<String>,
    }

    impl Serialize for Holder {
        /// With the `serde` feature: `{ "id": "billing-7", "payload": "…" }`.
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            Form {
                id: self.id().to_owned(),
                payload: self.payload().map(str::to_owned),
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for Holder {
        /// With the `serde` feature: checked as [`Holder::new`] and
        /// [`Holder::with_payload`] check them.
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let form = Form::deserialize(deserializer)?;
            let holder = Holder::new(form.id).map_err(|e| serde::de::Error::custom(e.message()))?;
            match form.payload {
                None => Ok(holder),
                Some(payload) => holder
                    .with_payload(payload)
                    .map_err(|e| serde::de::Error::custom(e.message())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_stored_as_one_string_and_read_back() {
        let plain = Holder::new("api-1:42").expect("valid");
        assert_eq!(plain.encoded(), "api-1:42");
        assert_eq!(Holder::decode(plain.encoded()), Some(plain.clone()));
        let carrying = plain.with_payload("line one\nline two").expect("valid");
        assert_eq!(carrying.encoded(), "api-1:42\nline one\nline two");
        let read = Holder::decode(carrying.encoded()).expect("read back");
        assert_eq!(read.id(), "api-1:42");
        assert_eq!(read.payload(), Some("line one\nline two"));
        assert_eq!(
            Holder::new("x")
                .expect("valid")
                .with_payload("")
                .expect("valid")
                .payload(),
            Some("")
        );
        assert_eq!(Holder::decode(""), None);
        assert_eq!(format!("{carrying}"), "api-1:42 [line one\nline two]");
    }

    #[test]
    fn bad_identities_and_payloads_are_configuration_errors() {
        for id in ["", "tab\there", &"x".repeat(MAX_HOLDER_ID + 1)] {
            let e = Holder::new(id).expect_err("refused");
            assert_eq!(e.kind(), ErrorKind::Configuration, "{id:?}");
        }
        let holder = Holder::new("ok").expect("valid");
        for payload in ["nul\0", &"x".repeat(MAX_HOLDER_PAYLOAD + 1)] {
            let e = holder.with_payload(payload).expect_err("refused");
            assert_eq!(e.kind(), ErrorKind::Configuration);
        }
        for secret in [
            "postgres://app:hunter2@db/locks",
            "see redis://:hunter2@cache:6379 for details",
            "{\"url\":\"mysql://u:hunter2@db\"}",
        ] {
            let e = holder.with_payload(secret).expect_err("refused");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
        holder
            .with_payload("https://ci.example.invalid/job?token=hunter2")
            .expect_err("a secret in the query");
        // A URL without a password is fine, a fragment and a user name too.
        for fine in [
            "built from https://example.invalid/ci/1234",
            "see https://example.invalid/runbook#locks",
            "ssh://deploy@build-7.example.invalid",
        ] {
            holder.with_payload(fine).expect(fine);
        }
    }

    #[test]
    fn this_process_names_the_host_and_process() {
        let this = Holder::this_process();
        let (host, pid) = this.id().rsplit_once(':').expect("host:pid");
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(this.payload(), None);
    }
}
