//! [`OwnerToken`], the secret that proves a lease is yours, and [`FencingToken`], the
//! public number that orders grants.

use std::fmt;

use crate::error::{Error, ErrorKind, Result};

/// A random 128-bit secret minted for one acquisition.
///
/// Release and extend compare it on the server, so only the holder of this exact
/// acquisition can end or prolong it. It is never logged: `Debug` prints a
/// placeholder, and there is no `Display`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken([u8; 16]);

impl OwnerToken {
    /// A fresh token from the operating system's cryptographically secure generator.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        crate::support::random::fill(&mut bytes);
        OwnerToken(bytes)
    }

    /// A token from raw bytes (a backend reading back what it stored).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        OwnerToken(bytes)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The token as 32 lowercase hexadecimal digits, for backends that store text.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push(char::from(DIGITS[usize::from(b >> 4)]));
            s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        s
    }

    /// Parses 32 hexadecimal digits; `None` for anything else.
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in s.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(OwnerToken(out))
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerToken(<redacted>)")
    }
}

/// A number that strictly increases over the successful acquisitions of one key.
///
/// Pass it to the resource the lock protects, and have that resource refuse any
/// write carrying a smaller token than one it has seen: a holder paused past its
/// lease then cannot overwrite the work of the next holder. It stays the same for the
/// whole life of a lease, renewals included.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// No fence: what a lease of an efficiency lock carries where the backend grants
    /// it without minting a fence
    /// ([`LockOptions::with_fenced`](crate::LockOptions::with_fenced) off, and
    /// [`Capabilities::unfenced_grants`](crate::backend::Capabilities::unfenced_grants)).
    /// No fenced grant carries it (a server's fence is a positive integer), and every
    /// fenced store refuses it ([`check_fence`](crate::backend::check_fence)).
    pub const NONE: FencingToken = FencingToken(0);

    /// Wraps a raw value.
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// Whether this is [`NONE`](Self::NONE): the grant carried no fence.
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// A fence from the signed integer a server keeps it in (a sequence's value, a
    /// revision, a zxid): an [`ErrorKind::Backend`] error for zero or a negative value,
    /// which no grant can carry, never a fence of 0 standing in for it.
    pub fn from_server(raw: i64) -> Result<Self> {
        match u64::try_from(raw) {
            Ok(value) if value > 0 => Ok(FencingToken(value)),
            _ => Err(Error::new(
                ErrorKind::Backend,
                format!("the server gave {raw} as a fence, where a fence is a positive integer"),
            )),
        }
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(t: FencingToken) -> u64 {
        t.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_fence_is_positive_or_an_error() {
        assert_eq!(
            FencingToken::from_server(7).map(FencingToken::get).ok(),
            Some(7)
        );
        assert_eq!(
            FencingToken::from_server(i64::MAX)
                .map(FencingToken::get)
                .ok(),
            Some(i64::MAX as u64)
        );
        for raw in [0, -1, i64::MIN] {
            let error = FencingToken::from_server(raw).expect_err("not a fence");
            assert_eq!(error.kind(), ErrorKind::Backend, "{error}");
            assert!(error.to_string().contains(&raw.to_string()), "{error}");
        }
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let t = OwnerToken::random();
        assert_eq!(OwnerToken::from_hex(&t.to_hex()), Some(t));
        assert_eq!(OwnerToken::from_hex("zz"), None);
        assert_eq!(OwnerToken::from_hex(&"g".repeat(32)), None);
        assert_ne!(OwnerToken::random(), OwnerToken::random());
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let t = OwnerToken::random();
        let shown = format!("{t:?}");
        assert!(!shown.contains(&t.to_hex()[..8]), "{shown}");
    }
}
