//! Signed tokens: the master's proof of who a native client is and what it may do,
//! checked by tablet servers without asking the master.
//!
//! The leader master signs [`Claims`] with the cluster's Ed25519 token key (kept in
//! the replicated catalog, so every master signs with the same key). Tablet servers
//! learn the public half from heartbeat responses and verify signature and expiry
//! locally, as Kudu's tablet servers verify authentication and authorization tokens.
//! A token is `cairn1.<base64url claims JSON>.<base64url signature>`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ring::signature::{self, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use super::{AuthError, Privileges};

const PREFIX: &str = "cairn1.";

/// What a token says about its holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user name.
    pub user: String,
    /// A superuser may do everything, administrative RPCs included.
    pub superuser: bool,
    /// May create tables.
    pub create: bool,
    /// Privileges per table id.
    pub tables: BTreeMap<String, Privileges>,
    /// Expiry, milliseconds since the Unix epoch.
    pub expires_ms: u64,
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// The cluster's private token key (masters only).
pub struct TokenKey {
    pair: Ed25519KeyPair,
    pkcs8: Vec<u8>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// A new random key; [`TokenKey::pkcs8`] is what to store.
    pub fn generate() -> Result<TokenKey, AuthError> {
        let rng = ring::rand::SystemRandom::new();
        let doc = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| AuthError::Internal("cannot generate a token key".into()))?;
        Self::from_pkcs8(doc.as_ref())
    }

    /// The key stored as PKCS#8.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<TokenKey, AuthError> {
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8)
            .map_err(|_| AuthError::Internal("the stored token key is unreadable".into()))?;
        Ok(TokenKey {
            pair,
            pkcs8: pkcs8.to_vec(),
        })
    }

    /// The PKCS#8 document to store.
    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The public key tablet servers verify with.
    pub fn public_key(&self) -> Vec<u8> {
        self.pair.public_key().as_ref().to_vec()
    }

    /// Signs `claims` into a token.
    pub fn sign(&self, claims: &Claims) -> Result<String, AuthError> {
        let body = serde_json::to_vec(claims)
            .map_err(|e| AuthError::Internal(format!("cannot encode claims: {e}")))?;
        let payload = B64URL.encode(body);
        let sig = self.pair.sign(payload.as_bytes());
        Ok(format!("{PREFIX}{payload}.{}", B64URL.encode(sig.as_ref())))
    }
}

/// Checks tokens against the cluster's public token key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenVerifier {
    public_key: Vec<u8>,
}

impl TokenVerifier {
    /// A verifier for the public key `public_key` (32 bytes).
    pub fn new(public_key: Vec<u8>) -> TokenVerifier {
        TokenVerifier { public_key }
    }

    /// The public key.
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// The claims of `token` if it is signed by the cluster key and not expired at
    /// `now_ms`.
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, AuthError> {
        let bad =
            || AuthError::BadToken("the token is malformed or not signed by this cluster".into());
        let rest = token.strip_prefix(PREFIX).ok_or_else(bad)?;
        let (payload, sig) = rest.split_once('.').ok_or_else(bad)?;
        let sig = B64URL.decode(sig).map_err(|_| bad())?;
        UnparsedPublicKey::new(&signature::ED25519, &self.public_key)
            .verify(payload.as_bytes(), &sig)
            .map_err(|_| bad())?;
        let body = B64URL.decode(payload).map_err(|_| bad())?;
        let claims: Claims = serde_json::from_slice(&body).map_err(|_| bad())?;
        if claims.expires_ms <= now_ms {
            return Err(AuthError::BadToken(
                "the token has expired: log in again".into(),
            ));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(expires_ms: u64) -> Claims {
        Claims {
            user: "ann".into(),
            superuser: false,
            create: true,
            tables: [("t1".to_string(), Privileges::SELECT)].into(),
            expires_ms,
        }
    }

    #[test]
    fn tokens_verify_until_they_expire_and_only_with_their_key() {
        let key = TokenKey::generate().unwrap();
        let again = TokenKey::from_pkcs8(key.pkcs8()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        let v = TokenVerifier::new(key.public_key());
        let t = key.sign(&claims(2_000)).unwrap();
        assert_eq!(v.verify(&t, 1_000).unwrap(), claims(2_000));
        assert!(v.verify(&t, 2_000).is_err(), "expired");
        let other = TokenVerifier::new(TokenKey::generate().unwrap().public_key());
        assert!(other.verify(&t, 1_000).is_err(), "another cluster's key");
        // Changing the claims (making oneself superuser) breaks the signature.
        let (payload, sig) = t.strip_prefix(PREFIX).unwrap().split_once('.').unwrap();
        let mut c: Claims = serde_json::from_slice(&B64URL.decode(payload).unwrap()).unwrap();
        c.superuser = true;
        let forged = format!(
            "{PREFIX}{}.{sig}",
            B64URL.encode(serde_json::to_vec(&c).unwrap())
        );
        assert!(v.verify(&forged, 1_000).is_err());
        for junk in ["", "cairn1.", "cairn1..", "cairn1.a.b", "Bearer x"] {
            assert!(v.verify(junk, 1_000).is_err(), "{junk}");
        }
    }
}
