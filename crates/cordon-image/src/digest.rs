//! sha256 content digests (`sha256:<64 hex>`), and readers and writers that compute one on the
//! way through.

use std::fmt;
use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::ImageError;

/// A sha256 digest. Only sha256 is accepted: it is what every registry and tool writes, and
/// one algorithm keeps the store's paths one shape (`blobs/sha256/<hex>`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(s: &str) -> Result<Digest, ImageError> {
        let bad = |reason: &str| ImageError::InvalidReference {
            reference: s.chars().take(100).collect(),
            reason: reason.to_string(),
        };
        let (alg, hex) = s
            .split_once(':')
            .ok_or_else(|| bad("a digest is ALGORITHM:HEX"))?;
        if alg != "sha256" {
            return Err(ImageError::Unsupported(format!(
                "digest algorithm {:?} (only sha256)",
                alg.chars().take(20).collect::<String>()
            )));
        }
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("a sha256 digest is 64 lowercase hex digits"));
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    pub(crate) fn from_hasher(h: Sha256) -> Digest {
        Digest {
            hex: hex::encode(h.finalize()),
        }
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The first 12 hex digits, as `docker images` shows ids.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }

    /// Fails with [`ImageError::DigestMismatch`] unless `actual` is this digest.
    pub fn verify(&self, actual: &Digest, what: impl FnOnce() -> String) -> Result<(), ImageError> {
        if self == actual {
            Ok(())
        } else {
            Err(ImageError::DigestMismatch {
                what: what(),
                expected: self.to_string(),
                actual: actual.to_string(),
            })
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl TryFrom<String> for Digest {
    type Error = ImageError;
    fn try_from(s: String) -> Result<Digest, ImageError> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

/// A reader that hashes and counts what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// The digest of everything read so far, and how many bytes that was.
    pub(crate) fn finish(self) -> (Digest, u64, R) {
        (Digest::from_hasher(self.hasher), self.count, self.inner)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_strictly() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&d.to_string()).ok(), Some(d.clone()));
        for bad in [
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:../../etc/passwd",
            "sha256:",
            "sha512:00",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
