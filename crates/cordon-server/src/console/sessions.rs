//! The console's sign-in sessions: a random token (the cookie) → the key's hash and the
//! session's CSRF token, for at most [`LIFETIME`], in memory (a server restart signs everyone
//! out, which is the safe way to lose them).
//!
//! Threat model: tokens are 32 random bytes, looked up by their hash (what a memory dump or a
//! timing difference could give away is a hash); the API key itself is never held.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session lasts from sign-in.
pub(crate) const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// At most this many live sessions; the oldest goes first past it (a flood of sign-ins
/// cannot grow the server's memory).
const MAX: usize = 10_000;

#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) key_hash: String,
    pub(crate) csrf: String,
    opened: Instant,
}

#[derive(Default)]
pub(crate) struct Sessions {
    by_token_hash: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for the key with this hash: (cookie token, CSRF token).
    pub(crate) fn open(&self, key_hash: String) -> (String, String) {
        let token = cordon_service::keys::random_hex(32);
        let csrf = cordon_service::keys::random_hex(32);
        if let Ok(mut m) = self.by_token_hash.lock() {
            m.retain(|_, s| s.opened.elapsed() < LIFETIME);
            if m.len() >= MAX {
                if let Some(oldest) = m
                    .iter()
                    .min_by_key(|(_, s)| s.opened)
                    .map(|(k, _)| k.clone())
                {
                    m.remove(&oldest);
                }
            }
            m.insert(
                cordon_service::keys::hash(&token),
                Session {
                    key_hash,
                    csrf: csrf.clone(),
                    opened: Instant::now(),
                },
            );
        }
        (token, csrf)
    }

    /// The live session of `token`.
    pub(crate) fn get(&self, token: &str) -> Option<Session> {
        let m = self.by_token_hash.lock().ok()?;
        m.get(&cordon_service::keys::hash(token))
            .filter(|s| s.opened.elapsed() < LIFETIME)
            .cloned()
    }

    /// Forgets the session of `token`.
    pub(crate) fn close(&self, token: &str) {
        if let Ok(mut m) = self.by_token_hash.lock() {
            m.remove(&cordon_service::keys::hash(token));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_token_only_and_ends_when_closed() {
        let s = Sessions::default();
        let (token, csrf) = s.open("h".into());
        assert_ne!(token, csrf);
        assert_eq!(s.get(&token).map(|x| x.csrf), Some(csrf));
        assert!(s.get("nope").is_none());
        s.close(&token);
        assert!(s.get(&token).is_none());
    }
}
