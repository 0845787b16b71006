//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL uses it: salted verifiers to
//! store, and the server side of the exchange.
//!
//! A [`ScramVerifier`] holds what PostgreSQL keeps in `pg_authid.rolpassword`:
//! `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`. Neither key lets
//! anyone log in: StoredKey is a hash of the client key, and the server key only
//! proves the server to the client. A stolen catalog therefore yields no passwords
//! and no way to authenticate without an offline dictionary attack on each salt.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use std::num::NonZeroU32;

use super::AuthError;

/// PBKDF2 iterations of new verifiers (PostgreSQL's `scram_iterations` default).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// A stored SCRAM-SHA-256 password verifier.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// The per-user random salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: [u8; 32],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; 32],
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramVerifier(..)")
    }
}

fn hmac256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(hmac::sign(&k, data).as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// Random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut b = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| AuthError::Internal("the system random generator failed".into()))?;
    Ok(b)
}

/// A random 32-byte token, base64url (session tokens of the SQL front ends).
pub fn random_token() -> Result<String, AuthError> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    Ok(URL_SAFE_NO_PAD.encode(random_bytes::<32>()?))
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    // PostgreSQL prepares the password with SASLprep and uses it as given when that
    // fails; clients do the same.
    let prepared = stringprep::saslprep(password)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| password.to_string());
    let mut out = [0u8; 32];
    let iters = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iters,
        salt,
        prepared.as_bytes(),
        &mut out,
    );
    out
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl ScramVerifier {
    /// A verifier for `password` with a fresh random salt.
    pub fn from_password(password: &str) -> Result<ScramVerifier, AuthError> {
        let salt = random_bytes::<16>()?.to_vec();
        Ok(Self::with_salt(password, salt, SCRAM_ITERATIONS))
    }

    fn with_salt(password: &str, salt: Vec<u8>, iterations: u32) -> ScramVerifier {
        let sp = salted_password(password, &salt, iterations);
        let client_key = hmac256(&sp, b"Client Key");
        ScramVerifier {
            iterations,
            salt,
            stored_key: sha256(&client_key),
            server_key: hmac256(&sp, b"Server Key"),
        }
    }

    /// Whether `password` is the one this verifier was made from (for clients that
    /// send a password in clear, over TLS).
    pub fn check_password(&self, password: &str) -> bool {
        let sp = salted_password(password, &self.salt, self.iterations);
        constant_time_eq(&sha256(&hmac256(&sp, b"Client Key")), &self.stored_key)
    }

    /// Parses PostgreSQL's text form,
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (what
    /// `\password` in psql sends in `ALTER USER … PASSWORD`).
    pub fn parse(s: &str) -> Option<ScramVerifier> {
        let rest = s.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iters, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iters.parse().ok().filter(|i| *i >= 1)?;
        let salt = B64.decode(salt).ok().filter(|s| !s.is_empty())?;
        let stored_key: [u8; 32] = B64.decode(stored).ok()?.try_into().ok()?;
        let server_key: [u8; 32] = B64.decode(server).ok()?.try_into().ok()?;
        Some(ScramVerifier {
            iterations,
            salt,
            stored_key,
            server_key,
        })
    }
}

impl std::fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

/// The server's half of one SCRAM-SHA-256 exchange, after the client's first message.
#[derive(Debug)]
pub struct ScramServer {
    verifier: ScramVerifier,
    /// Whether the user exists: for an unknown user the exchange runs to the end with a
    /// made-up verifier (as PostgreSQL does) so that a client cannot tell a wrong user
    /// from a wrong password.
    known: bool,
    client_first_bare: String,
    server_first: String,
    gs2_header: String,
    nonce: String,
}

/// A SASL message in bytes as text.
fn text(msg: &[u8]) -> Result<&str, AuthError> {
    std::str::from_utf8(msg).map_err(|_| AuthError::Protocol("SCRAM message is not UTF-8".into()))
}

fn attr<'a>(part: Option<&'a str>, name: char) -> Result<&'a str, AuthError> {
    part.and_then(|p| p.strip_prefix(name))
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| AuthError::Protocol(format!("SCRAM message lacks its '{name}=' attribute")))
}

impl ScramServer {
    /// Reads the client-first message and answers with the server-first message.
    /// `verifier` is `None` for a user that does not exist or has no password.
    pub fn start(
        verifier: Option<&ScramVerifier>,
        client_first: &[u8],
    ) -> Result<(ScramServer, String), AuthError> {
        let msg = text(client_first)?;
        // gs2-header: "n,," or "y,," (no channel binding; "p=" asks for binding, which
        // is only offered as SCRAM-SHA-256-PLUS and not here), optional authzid.
        let mut parts = msg.splitn(3, ',');
        let cb = parts.next().unwrap_or_default();
        let authzid = parts.next().unwrap_or_default();
        let bare = parts
            .next()
            .ok_or_else(|| AuthError::Protocol("malformed SCRAM client-first message".into()))?;
        match cb {
            "n" | "y" => {}
            c if c.starts_with("p=") => {
                return Err(AuthError::Protocol(
                    "channel binding is not offered: use SCRAM-SHA-256".into(),
                ));
            }
            _ => {
                return Err(AuthError::Protocol("malformed SCRAM gs2 header".into()));
            }
        }
        let mut fields = bare.split(',');
        let _user = attr(fields.next(), 'n')?;
        let client_nonce = attr(fields.next(), 'r')?;
        if client_nonce.is_empty()
            || !client_nonce
                .chars()
                .all(|c| c.is_ascii_graphic() && c != ',')
        {
            return Err(AuthError::Protocol("bad SCRAM client nonce".into()));
        }
        let (verifier, known) = match verifier {
            Some(v) => (v.clone(), true),
            None => {
                let v = ScramVerifier::with_salt(
                    &B64.encode(random_bytes::<16>()?),
                    random_bytes::<16>()?.to_vec(),
                    SCRAM_ITERATIONS,
                );
                (v, false)
            }
        };
        let nonce = format!("{client_nonce}{}", B64.encode(random_bytes::<18>()?));
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        Ok((
            ScramServer {
                verifier,
                known,
                client_first_bare: bare.to_string(),
                server_first: server_first.clone(),
                gs2_header: format!("{cb},{authzid},"),
                nonce,
            },
            server_first,
        ))
    }

    /// Checks the client-final message's proof; on success returns the server-final
    /// message (`v=<signature>`) that proves the server knew the verifier.
    pub fn finish(&self, client_final: &[u8]) -> Result<String, AuthError> {
        let msg = text(client_final)?;
        let (without_proof, proof) = msg.rsplit_once(",p=").ok_or_else(|| {
            AuthError::Protocol("SCRAM client-final message lacks a proof".into())
        })?;
        let mut fields = without_proof.split(',');
        let binding = attr(fields.next(), 'c')?;
        let nonce = attr(fields.next(), 'r')?;
        if B64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(AuthError::Protocol("SCRAM channel binding mismatch".into()));
        }
        if nonce != self.nonce {
            return Err(AuthError::Protocol("SCRAM nonce mismatch".into()));
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| AuthError::Protocol("SCRAM proof is not base64".into()))?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let client_signature = hmac256(&self.verifier.stored_key, auth_message.as_bytes());
        if proof.len() != 32 {
            return Err(AuthError::BadPassword);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(client_signature.iter())
            .map(|(a, b)| a ^ b)
            .collect();
        if !self.known || !constant_time_eq(&sha256(&client_key), &self.verifier.stored_key) {
            return Err(AuthError::BadPassword);
        }
        let server_signature = hmac256(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client side of the exchange, as libpq computes it.
    fn client_final(password: &str, client_first_bare: &str, server_first: &str) -> String {
        let mut salt = None;
        let mut iters = 0;
        let mut nonce = "";
        for f in server_first.split(',') {
            if let Some(s) = f.strip_prefix("s=") {
                salt = Some(B64.decode(s).unwrap());
            } else if let Some(i) = f.strip_prefix("i=") {
                iters = i.parse().unwrap();
            } else if let Some(r) = f.strip_prefix("r=") {
                nonce = r;
            }
        }
        let sp = salted_password(password, &salt.unwrap(), iters);
        let client_key = hmac256(&sp, b"Client Key");
        let stored = sha256(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = hmac256(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn exchange_accepts_the_right_password_only() {
        let v = ScramVerifier::from_password("s3cret").unwrap();
        let bare = "n=,r=abcdefghijklmnop";
        let (srv, first) = ScramServer::start(Some(&v), format!("n,,{bare}").as_bytes()).unwrap();
        assert!(
            srv.finish(client_final("s3cret", bare, &first).as_bytes())
                .is_ok()
        );
        let (srv, first) = ScramServer::start(Some(&v), format!("n,,{bare}").as_bytes()).unwrap();
        assert!(matches!(
            srv.finish(client_final("wrong", bare, &first).as_bytes()),
            Err(AuthError::BadPassword)
        ));
        // An unknown user fails the same way, at the same step.
        let (srv, first) = ScramServer::start(None, format!("n,,{bare}").as_bytes()).unwrap();
        assert!(matches!(
            srv.finish(client_final("s3cret", bare, &first).as_bytes()),
            Err(AuthError::BadPassword)
        ));
    }

    #[test]
    fn verifier_text_round_trips_and_checks_passwords() {
        let v = ScramVerifier::from_password("pässword").unwrap();
        let back = ScramVerifier::parse(&v.to_string()).unwrap();
        assert_eq!(back, v);
        assert!(back.check_password("pässword"));
        assert!(!back.check_password("password"));
        for bad in ["", "SCRAM-SHA-256$", "SCRAM-SHA-256$x:AA==$a:b", "md5abc"] {
            assert!(ScramVerifier::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn malformed_messages_are_refused_not_panicked_on() {
        let v = ScramVerifier::from_password("p").unwrap();
        for m in [
            &b""[..],
            b"n,,",
            b"p=tls-server-end-point,,n=,r=x",
            b"n,,n=,r=",
            b"\xff\xfe",
            b"q,,n=,r=abc",
        ] {
            assert!(ScramServer::start(Some(&v), m).is_err(), "{m:?}");
        }
        let (srv, _) = ScramServer::start(Some(&v), b"n,,n=,r=abc").unwrap();
        for m in [
            &b""[..],
            b"c=biws",
            b"c=biws,r=abc,p=!!",
            b"c=eSws,r=abc,p=AAAA",
        ] {
            assert!(srv.finish(m).is_err(), "{m:?}");
        }
    }
}
