//! Who is calling: API keys looked up by their hash, and each key's rate limit. Every door
//! authenticates through [`Service::authenticate`] (a key) or [`Service::charge`] (a request
//! made on a key's behalf, such as one with a sandbox's access token), so a key has one
//! budget whatever door it comes through.
//!
//! Threat model: tokens are hostile input (compared only as hashes, never logged); a limiter
//! that cannot answer refuses — failing closed is the point of a limit.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultDirectRateLimiter, Quota};

use crate::error::ServiceError;
use crate::registry::KeyRecord;
use crate::{keys, Caller, Service};

/// Key ids and their token buckets: `rps` requests per second, bursts up to `rps`.
#[derive(Default)]
pub struct KeyLimiter {
    buckets: Mutex<HashMap<String, (u32, Arc<DefaultDirectRateLimiter>)>>,
}

impl KeyLimiter {
    /// Takes one request from `key`'s allowance of `rps` a second. Refuses when the allowance
    /// is spent, and when the limiter itself cannot answer (a poisoned lock).
    pub fn check(&self, key: &str, rps: u32) -> Result<(), ServiceError> {
        let refuse = || {
            ServiceError::too_many(
                format!("rate limit of {rps} requests per second exceeded"),
                1,
            )
        };
        let bucket = {
            let Ok(mut m) = self.buckets.lock() else {
                return Err(refuse());
            };
            let fresh = || {
                let n = NonZeroU32::new(rps).unwrap_or(NonZeroU32::MIN);
                (
                    rps,
                    Arc::new(DefaultDirectRateLimiter::direct(Quota::per_second(n))),
                )
            };
            let entry = m.entry(key.to_string()).or_insert_with(fresh);
            // A key whose limit changed starts over with its new allowance.
            if entry.0 != rps {
                *entry = fresh();
            }
            entry.1.clone()
        };
        bucket.check().map_err(|_| refuse())
    }
}

impl Service {
    /// The caller that `token` (an API key) names, after one request is charged to its rate
    /// limit. `missing` is the message for no token at all (each door says how to send one).
    pub fn authenticate(&self, token: Option<&str>, missing: &str) -> Result<Caller, ServiceError> {
        let Some(token) = token else {
            self.metrics.deny("unauthenticated");
            return Err(ServiceError::unauthorized(missing.to_string()));
        };
        self.authenticate_hashed(&keys::hash(token))
    }

    /// [`Service::authenticate`] for a key known by its hash (a console session holds the
    /// hash, never the key): revoked since is refused, and the rate limit applies.
    pub fn authenticate_hashed(&self, key_hash: &str) -> Result<Caller, ServiceError> {
        let rec = match self.registry.key_by_hash(key_hash)? {
            Some(r) if !r.revoked => r,
            _ => {
                self.metrics.deny("bad_key");
                return Err(ServiceError::unauthorized("invalid or revoked API key"));
            }
        };
        self.charge(&rec)?;
        Ok(Caller {
            key_id: rec.id,
            max_sandboxes: rec.max_sandboxes,
        })
    }

    /// Counts one request against `rec`'s rate limit: every request made on a key's behalf
    /// (with the key itself, or with a token of one of its sandboxes) spends from the same
    /// budget.
    pub fn charge(&self, rec: &KeyRecord) -> Result<(), ServiceError> {
        self.limiter
            .check(&rec.id, rec.requests_per_second)
            .inspect_err(|_| self.metrics.deny("rate_limit"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_rate_and_no_more() {
        let l = KeyLimiter::default();
        for _ in 0..5 {
            l.check("a", 5).expect("within the burst");
        }
        let e = l.check("a", 5).expect_err("over the limit");
        assert_eq!(e.kind, crate::error::ErrorKind::RateLimited);
        assert_eq!(e.retry_after, Some(1));
        l.check("b", 5).expect("another key has its own budget");
    }

    #[test]
    fn a_poisoned_limiter_refuses() {
        let l = Arc::new(KeyLimiter::default());
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let _g = l2.buckets.lock().expect("lock");
            panic!("poison the lock");
        })
        .join();
        assert!(l.buckets.is_poisoned());
        assert!(
            l.check("a", 100).is_err(),
            "a limiter that cannot count must refuse"
        );
    }
}
