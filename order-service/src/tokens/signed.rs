//! Idempotency tokens that prove by themselves they were issued here, so a token Redis
//! forgot (a restart keeps nothing) can still be told apart from one never issued.
//!
//! A token is a UUID (version 8, RFC 9562's layout for custom contents):
//!
//! | bytes | contents |
//! | --- | --- |
//! | 0..6 | expiry, unix milliseconds, big-endian (48 bits: good until the year 10889) |
//! | 6..11 | random, except the version nibble (`8`) and the variant bits (`10`): 34 bits |
//! | 11..16 | the first 40 bits of HMAC-SHA256 over bytes 0..11 (and the taker) under the instances' secret |
//!
//! With end-user identity on, the MAC also covers the user who took the token, so a token
//! Redis forgot proves whose it is: presented by anyone else it is not recognised, and cannot
//! be claimed again in their name. Without identity the MAC is what it always was.
//!
//! The random bits keep tokens with the same expiry apart; a collision is also refused by
//! the `NX` with which a token is stored. 40 bits of MAC leave a forger one chance in 10^12
//! per request, each of which costs them a round trip. The expiry is exact to the
//! millisecond, the one Redis is given, so Redis and the token never disagree about it.

use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use shared::ids::UserId;
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// Separates this MAC from any other use of the same secret.
const CONTEXT: &[u8] = b"order-service idempotency token v8\0";
/// Separates the taker's bytes from the token's in the MAC's input.
const TAKER: &[u8] = b"\0taker";
const MAC_BYTES: usize = 5;
const SIGNED_BYTES: usize = 16 - MAC_BYTES;

/// The key tokens are signed with: from `IDEMPOTENCY_TOKEN_SECRET`, or generated once and
/// kept in the orders database. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSecret(Vec<u8>);

impl TokenSecret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// 32 fresh random bytes.
    pub fn generate() -> Self {
        let mut bytes = vec![0; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSecret(..)")
    }
}

/// Mints and checks tokens under one secret.
#[derive(Clone, Debug)]
pub struct TokenSigner {
    secret: TokenSecret,
}

impl TokenSigner {
    pub fn new(secret: TokenSecret) -> Self {
        Self { secret }
    }

    /// A new token for `taker` (`None` without identity) that expires at `expires_at` (kept
    /// to the millisecond).
    pub fn mint(&self, expires_at: DateTime<Utc>, taker: Option<UserId>) -> Uuid {
        let mut bytes = [0u8; 16];
        let millis = u64::try_from(expires_at.timestamp_millis()).unwrap_or_default();
        bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
        rand::rng().fill_bytes(&mut bytes[6..SIGNED_BYTES]);
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mac = self.mac(&bytes[..SIGNED_BYTES], taker);
        bytes[SIGNED_BYTES..].copy_from_slice(&mac[..MAC_BYTES]);
        Uuid::from_bytes(bytes)
    }

    /// The expiry of a token this secret minted for `taker`; `None` for any other UUID
    /// (another version, a wrong MAC, another taker's token).
    pub fn expiry(&self, token: &Uuid, taker: Option<UserId>) -> Option<DateTime<Utc>> {
        let bytes = token.as_bytes();
        if token.get_version_num() != 8 || token.get_variant() != uuid::Variant::RFC4122 {
            return None;
        }
        let mac = self.mac(&bytes[..SIGNED_BYTES], taker);
        if !bool::from(mac[..MAC_BYTES].ct_eq(&bytes[SIGNED_BYTES..])) {
            return None;
        }
        let mut millis = [0u8; 8];
        millis[2..].copy_from_slice(&bytes[..6]);
        DateTime::from_timestamp_millis(i64::try_from(u64::from_be_bytes(millis)).ok()?)
    }

    /// Whether `token` was minted here for `taker` and has not expired at `now`.
    pub fn is_live(
        &self,
        token: &Uuid,
        taker: Option<UserId>,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        self.expiry(token, taker).filter(|expiry| *expiry > now)
    }

    fn mac(&self, signed: &[u8], taker: Option<UserId>) -> [u8; 32] {
        let mut message = Vec::with_capacity(CONTEXT.len() + signed.len() + TAKER.len() + 8);
        message.extend_from_slice(CONTEXT);
        message.extend_from_slice(signed);
        if let Some(taker) = taker {
            message.extend_from_slice(TAKER);
            message.extend_from_slice(&taker.0.to_be_bytes());
        }
        hmac_sha256(self.secret.as_bytes(), &message)
    }
}

/// HMAC-SHA256 (RFC 2104), on the `sha2` the workspace already uses.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 2 (short key) and 6 (key longer than a block).
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_minted_token_is_a_v8_uuid_carrying_its_expiry() {
        let signer = TokenSigner::new(TokenSecret::generate());
        let expires_at = DateTime::from_timestamp_millis(1_900_000_000_123).expect("a date");
        let token = signer.mint(expires_at, None);
        assert_eq!(token.get_version_num(), 8);
        assert_eq!(token.get_variant(), uuid::Variant::RFC4122);
        assert_eq!(signer.expiry(&token, None), Some(expires_at));
        assert_ne!(
            signer.mint(expires_at, None),
            token,
            "random bits tell them apart"
        );
    }

    #[test]
    fn other_secrets_other_versions_and_altered_tokens_are_not_ours() {
        let signer = TokenSigner::new(TokenSecret::new(*b"one secret of the instances....."));
        let now = Utc::now();
        let token = signer.mint(now + Duration::hours(1), None);
        assert!(signer.is_live(&token, None, now).is_some());
        let other = TokenSigner::new(TokenSecret::new(*b"another secret.................."));
        assert_eq!(other.expiry(&token, None), None);
        assert_eq!(signer.expiry(&Uuid::new_v4(), None), None);
        let mut altered = *token.as_bytes();
        altered[0] ^= 1; // a later expiry, say
        assert_eq!(signer.expiry(&Uuid::from_bytes(altered), None), None);
    }

    #[test]
    fn a_token_proves_its_taker_and_is_nobody_elses() {
        let signer = TokenSigner::new(TokenSecret::generate());
        let now = Utc::now();
        let token = signer.mint(now + Duration::hours(1), Some(UserId(7)));
        assert!(signer.is_live(&token, Some(UserId(7)), now).is_some());
        assert_eq!(signer.is_live(&token, Some(UserId(8)), now), None);
        assert_eq!(signer.is_live(&token, None, now), None);
        let anonymous = signer.mint(now + Duration::hours(1), None);
        assert_eq!(signer.is_live(&anonymous, Some(UserId(7)), now), None);
    }

    #[test]
    fn an_expired_token_is_not_live() {
        let signer = TokenSigner::new(TokenSecret::generate());
        let now = Utc::now();
        let token = signer.mint(now - Duration::seconds(1), None);
        assert!(signer.expiry(&token, None).is_some());
        assert_eq!(signer.is_live(&token, None, now), None);
    }

    #[test]
    fn the_secret_is_never_printed() {
        let secret = TokenSecret::new(*b"hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
    }
}
