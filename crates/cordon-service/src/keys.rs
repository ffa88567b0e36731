//! API keys: random secrets shown once, stored only as SHA-256 hashes.

use sha2::{Digest, Sha256};

/// Prefix that makes a cordon key recognisable in a leaked-secret scan.
pub const PREFIX: &str = "cdn_";

/// A new key: (secret to show once, key id).
pub fn generate() -> std::io::Result<(String, String)> {
    let mut secret = [0u8; 24];
    let mut id = [0u8; 6];
    getrandom::getrandom(&mut secret).map_err(|e| std::io::Error::other(e.to_string()))?;
    getrandom::getrandom(&mut id).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok((
        format!("{PREFIX}{}", hex::encode(secret)),
        format!("key_{}", hex::encode(id)),
    ))
}

pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Random hex for ids.
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    // getrandom only fails on broken hosts; fall back to time-derived bytes there.
    if getrandom::getrandom(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> (i % 16 * 8)) as u8 ^ i as u8;
        }
    }
    hex::encode(b)
}

/// Compares two hex digests without an early exit.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_and_compare() {
        let (secret, id) = generate().unwrap();
        assert!(secret.starts_with(PREFIX) && id.starts_with("key_"));
        assert_eq!(hash(&secret), hash(&secret));
        assert!(constant_time_eq(&hash(&secret), &hash(&secret)));
        assert!(!constant_time_eq(&hash(&secret), &hash("other")));
        assert!(!hash(&secret).contains(&secret));
    }
}
