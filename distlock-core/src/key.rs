//! [`LockKey`]: the validated name of a lock.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The name of a lock: 1 to 256 bytes of UTF-8 with no control characters.
///
/// Keys are checked once, here, so that every backend sees the same rules and no
/// backend has to guess how to escape a newline or an empty name. Cloning is cheap.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// The longest key, in bytes of UTF-8.
    pub const MAX_LEN: usize = 256;

    /// Checks `key` and wraps it; an empty, too long or control-character key is an
    /// [`ErrorKind::InvalidKey`](crate::ErrorKind::InvalidKey) error.
    pub fn new(key: impl AsRef<str>) -> Result<Self> {
        let key = key.as_ref();
        if key.is_empty() {
            return Err(Error::invalid_key("a lock key must not be empty"));
        }
        if key.len() > Self::MAX_LEN {
            return Err(Error::invalid_key(format!(
                "a lock key is at most {} bytes, this one has {}",
                Self::MAX_LEN,
                key.len()
            )));
        }
        if let Some(pos) = key.chars().position(char::is_control) {
            return Err(Error::invalid_key(format!(
                "a lock key must not hold control characters (one at character {pos})"
            )));
        }
        Ok(LockKey(Arc::from(key)))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for LockKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockKey({:?})", &*self.0)
    }
}

impl FromStr for LockKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        LockKey::new(s)
    }
}

impl TryFrom<&str> for LockKey {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self> {
        LockKey::new(s)
    }
}

impl TryFrom<String> for LockKey {
    type Error = Error;

    fn try_from(s: String) -> Result<Self> {
        LockKey::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn accepts_ordinary_and_unicode_keys() {
        for ok in ["a", "jobs/nightly-report", "ключ", &"x".repeat(256)] {
            assert_eq!(
                LockKey::new(ok).map(|k| k.to_string()).ok().as_deref(),
                Some(ok)
            );
        }
    }

    #[test]
    fn rejects_bad_keys_with_a_typed_error() {
        let long = "x".repeat(257);
        let multibyte = "é".repeat(129); // 258 bytes in 129 characters
        for bad in [
            "",
            "a\nb",
            "tab\there",
            "\u{7f}",
            "nul\0",
            &long,
            &multibyte,
        ] {
            let err = LockKey::new(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::InvalidKey, "{bad:?}: {err}");
        }
    }
}
