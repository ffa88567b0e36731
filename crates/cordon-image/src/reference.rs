//! Image references as Docker writes them: `python:3.12-slim`, `ghcr.io/o/r:tag`,
//! `localhost:5000/app@sha256:…`, normalised to a full `registry/repository[:tag][@digest]`.

use std::fmt;

use crate::digest::Digest;
use crate::error::ImageError;

/// The registry Docker's short names live on.
pub const DOCKER_HUB: &str = "docker.io";

/// A parsed, normalised reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `docker.io`, `ghcr.io`, `127.0.0.1:5000`, …
    pub registry: String,
    /// `library/python`, `o/r`, …
    pub repository: String,
    /// The tag; `latest` when neither tag nor digest was given.
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference the way `docker pull` does.
    pub fn parse(s: &str) -> Result<Reference, ImageError> {
        let bad = |reason: &str| ImageError::InvalidReference {
            reference: s.chars().take(300).collect(),
            reason: reason.to_string(),
        };
        if s.is_empty() || s.len() > 1024 {
            return Err(bad("empty or longer than 1024 characters"));
        }
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => (n, Some(Digest::parse(d)?)),
            None => (s, None),
        };
        let (name, tag) = match name.rfind(':') {
            Some(i) if !name[i..].contains('/') => (&name[..i], Some(&name[i + 1..])),
            _ => (name, None),
        };
        if let Some(t) = tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                && !t.starts_with(['.', '-']);
            if !ok {
                return Err(bad(
                    "a tag is 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'",
                ));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        let registry = if registry == "index.docker.io" || registry == "registry-1.docker.io" {
            DOCKER_HUB.to_string()
        } else {
            registry
        };
        if !registry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        {
            return Err(bad("a registry is HOST[:PORT]"));
        }
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && c.as_bytes()[0].is_ascii_alphanumeric()
                && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
        };
        if repository.len() > 255 || !repository.split('/').all(component_ok) {
            return Err(bad(
                "a repository is lowercase letters, digits and separators (._-), in /-separated components",
            ));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(_)) => None,
            (None, None) => Some("latest".to_string()),
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository` without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The host to talk to: Docker Hub's API lives on `registry-1.docker.io`.
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }

    /// What the registry API takes after `/manifests/`: the digest if given, else the tag.
    pub fn api_reference(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// The short form Docker shows: `python:3.12-slim` for Docker Hub's library images.
    pub fn familiar(&self) -> String {
        // Only `library/NAME` shortens to `NAME`: `library/a/b` written `a/b` would name
        // Docker Hub's `a/b` (as Docker's own familiar form has it). And a repository whose
        // first component reads as a host (`a.io/b`) keeps `docker.io/`: without it, that
        // component would be taken for the registry.
        let name = if self.registry == DOCKER_HUB {
            let short = match self.repository.strip_prefix("library/") {
                Some(short) if !short.contains('/') => short,
                _ => &self.repository,
            };
            match short.split_once('/') {
                Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => {
                    self.name()
                }
                _ => short.to_string(),
            }
        } else {
            self.name()
        };
        let mut s = name;
        if let Some(t) = &self.tag {
            s.push(':');
            s.push_str(t);
        }
        if let Some(d) = &self.digest {
            s.push('@');
            s.push_str(&d.to_string());
        }
        s
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_short_names_normalise() {
        let cases = [
            ("python", "docker.io/library/python:latest"),
            ("python:3.12-slim", "docker.io/library/python:3.12-slim"),
            ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
            ("ghcr.io/o/r/x:v1", "ghcr.io/o/r/x:v1"),
            ("localhost:5000/app", "localhost:5000/app:latest"),
            ("127.0.0.1:5000/a/b:t", "127.0.0.1:5000/a/b:t"),
            ("localhost/app:1", "localhost/app:1"),
            (
                "index.docker.io/library/alpine",
                "docker.io/library/alpine:latest",
            ),
        ];
        for (input, want) in cases {
            let r = Reference::parse(input).expect(input);
            assert_eq!(r.to_string(), want, "{input}");
        }
        let d = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let r = Reference::parse(&format!("alpine@{d}")).expect("digest");
        assert_eq!(r.tag, None);
        assert_eq!(r.api_reference(), d);
        assert_eq!(r.familiar(), format!("alpine@{d}"));
        assert_eq!(
            Reference::parse("python:3").expect("p").familiar(),
            "python:3"
        );
    }

    /// Found by fuzzing (fuzz/corpus/image_reference/crash-*): the short form of
    /// `docker.io/library/a/b` was `a/b`, and that of `docker.io/a.io/b` was `a.io/b`: each
    /// names another image.
    #[test]
    fn the_short_form_names_the_same_image() {
        for s in [
            "docker.io/library/a/b",
            "library/a/b:1",
            "python",
            "o/r",
            "ghcr.io/library/x",
            "docker.io/libocker.io/library/alpinrary/alpine",
            "docker.io/localhost/x",
        ] {
            let r = Reference::parse(s).expect(s);
            assert_eq!(Reference::parse(&r.familiar()).expect("familiar"), r, "{s}");
        }
        assert_eq!(
            Reference::parse("docker.io/library/a/b")
                .expect("ref")
                .familiar(),
            "library/a/b:latest"
        );
    }

    #[test]
    fn bad_references_are_refused() {
        for bad in [
            "",
            "UPPER",
            "a:",
            "a:-x",
            "a/../b",
            "a//b",
            "a@sha256:zz",
            "host:5000/",
            "a:b:c",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
