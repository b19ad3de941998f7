//! Browser sessions of the dashboard: the access token is exchanged once for a session
//! cookie, and each session's form (CSRF) token is derived from it, so neither the access
//! token nor a form token valid for someone else's session ever appears in a page.
//!
//! Stateless: a session is `nonce.HMAC(token, "session" nonce)`, its form token
//! `HMAC(token, "csrf" nonce)` (HMAC-SHA-256, RFC 2104). A restarted dashboard with the same
//! token keeps its sessions; a new token (delete the token file) ends them all.

use sha2::{Digest, Sha256};

/// HMAC-SHA-256 of `msg` under `key` (RFC 2104).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys of one dashboard (derived from its access token).
#[derive(Clone)]
pub struct Keys {
    token: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

impl Keys {
    /// Keys for the access token `token`.
    pub fn new(token: &str) -> Keys {
        Keys {
            token: token.to_string(),
        }
    }

    fn mac(&self, purpose: &str, nonce: &str) -> String {
        let msg = format!("mozart-dashboard {purpose}\0{nonce}");
        hex(&hmac_sha256(self.token.as_bytes(), msg.as_bytes()))
    }

    /// Whether `given` is the access token (no early exit on the first differing byte).
    pub fn is_token(&self, given: &str) -> bool {
        constant_eq(given, &self.token)
    }

    /// A new session cookie value for the random `nonce`.
    pub fn session(&self, nonce: &str) -> String {
        format!("{nonce}.{}", self.mac("session", nonce))
    }

    /// The nonce of a genuine session cookie value.
    pub fn check_session<'a>(&self, value: &'a str) -> Option<&'a str> {
        let (nonce, mac) = value.split_once('.')?;
        let well_formed =
            !nonce.is_empty() && nonce.len() <= 64 && nonce.bytes().all(|b| b.is_ascii_hexdigit());
        (well_formed && constant_eq(mac, &self.mac("session", nonce))).then_some(nonce)
    }

    /// The form token of the session `nonce`.
    pub fn csrf(&self, nonce: &str) -> String {
        self.mac("csrf", nonce)
    }
}

/// Compare without an early exit on the first differing byte.
pub fn constant_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 and test case 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn sessions_and_form_tokens_belong_to_their_token_and_nonce() {
        let keys = Keys::new("0123456789abcdef0123");
        let cookie = keys.session("abcd");
        assert_eq!(keys.check_session(&cookie), Some("abcd"));
        assert_eq!(
            Keys::new("another-token-0123456").check_session(&cookie),
            None
        );
        assert_eq!(keys.check_session("abce."), None);
        let forged = cookie.replace("abcd.", "abce.");
        assert_eq!(keys.check_session(&forged), None);
        assert_ne!(keys.csrf("abcd"), keys.csrf("abce"));
        assert!(!cookie.contains("0123456789abcdef0123"));
        assert!(keys.is_token("0123456789abcdef0123"));
        assert!(!keys.is_token("0123456789abcdef012"));
    }
}
