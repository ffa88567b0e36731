//! The JSON documents of OCI and Docker images: manifests, indexes, configs, and choosing a
//! platform's manifest from an index.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::ImageError;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+json";
pub const DOCKER_SCHEMA1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// Everything a registry may answer a manifest request with, in order of preference.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// Largest manifest, index or config read (containerd's limit for manifests is the same).
pub const MAX_DOCUMENT: u64 = 4 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this process runs on, in OCI's words.
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Platform {
            architecture: architecture.to_string(),
            os: "linux".to_string(),
            variant: variant.map(str::to_string),
        }
    }

    /// Parses `os/arch[/variant]`.
    pub fn parse(s: &str) -> Result<Platform, ImageError> {
        // The grammar of OCI's platform fields as registries write them: lower-case OS and
        // architecture (`amd64`, `arm64`, `x86_64` has an underscore), an optional variant.
        // Anything else would never match an index entry, so it is refused here rather than
        // reported later as "no such platform".
        let part = |p: &str, underscore: bool| {
            !p.is_empty()
                && p.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || (underscore && b == b'_')
                })
        };
        let mut it = s.split('/');
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(os), Some(arch), variant, None)
                if part(os, false)
                    && part(arch, true)
                    && variant.is_none_or(|v| part(v, false)) =>
            {
                Ok(Platform {
                    os: os.to_string(),
                    architecture: arch.to_string(),
                    variant: variant.map(str::to_string),
                })
            }
            _ => Err(ImageError::InvalidPlatform(s.chars().take(100).collect())),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

/// A manifest document: one image, or an index of them.
#[derive(Debug, Clone)]
pub enum Document {
    Manifest(Manifest),
    Index(Index),
}

impl Document {
    /// Parses a manifest or index, told apart by its media type (the header's, then the
    /// document's own) and failing that by its shape.
    pub fn parse(bytes: &[u8], header_type: Option<&str>) -> Result<Document, ImageError> {
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| ImageError::format("manifest", e.to_string()))?;
        let own = v.get("mediaType").and_then(|m| m.as_str());
        let mt = own.or(header_type.filter(|h| !h.is_empty() && *h != "application/json"));
        if v.get("schemaVersion").and_then(|s| s.as_u64()) == Some(1)
            || matches!(mt, Some(DOCKER_SCHEMA1 | DOCKER_SCHEMA1_SIGNED))
        {
            return Err(ImageError::Unsupported(
                "Docker schema 1 manifests (deprecated since 2017; push the image again with a current tool)".into(),
            ));
        }
        let is_index = match mt {
            Some(OCI_INDEX | DOCKER_LIST) => true,
            Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
            _ => v.get("manifests").is_some(),
        };
        if is_index {
            serde_json::from_value(v)
                .map(Document::Index)
                .map_err(|e| ImageError::format("image index", e.to_string()))
        } else {
            serde_json::from_value(v)
                .map(Document::Manifest)
                .map_err(|e| ImageError::format("image manifest", e.to_string()))
        }
    }
}

impl Index {
    /// The entry for `want`: same OS and architecture, the variant matching when both name
    /// one (an entry without a variant fits any). Attestation manifests (`unknown/unknown`)
    /// never match.
    pub fn select(&self, want: &Platform, reference: &str) -> Result<&Descriptor, ImageError> {
        let fits = |d: &&Descriptor| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == want.os && p.architecture == want.architecture)
        };
        let candidates: Vec<&Descriptor> = self.manifests.iter().filter(fits).collect();
        let exact = candidates.iter().find(|d| {
            d.platform.as_ref().and_then(|p| p.variant.as_deref()) == want.variant.as_deref()
        });
        let loose = candidates.iter().find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.variant.is_none() || want.variant.is_none())
        });
        if let Some(d) = exact.or(loose) {
            return Ok(d);
        }
        // An index without platforms (an OCI layout of one image) has one answer.
        if self.manifests.len() == 1 && self.manifests[0].platform.is_none() {
            return Ok(&self.manifests[0]);
        }
        let available: Vec<String> = self
            .manifests
            .iter()
            .filter_map(|d| d.platform.as_ref())
            .filter(|p| p.os != "unknown")
            .map(|p| p.to_string())
            .collect();
        Err(ImageError::NoPlatform {
            reference: reference.to_string(),
            wanted: want.to_string(),
            available: if available.is_empty() {
                "nothing".into()
            } else {
                available.join(", ")
            },
        })
    }
}

/// The image configuration (the parts cordon reads).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConfigFile {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default)]
    pub config: Option<ImageConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub diff_ids: Vec<Digest>,
}

/// How the image wants to be run: what `docker run` honours.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageConfig {
    /// `KEY=VALUE` entries.
    #[serde(rename = "Env", default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    #[serde(
        rename = "Entrypoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(
        rename = "WorkingDir",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub working_dir: Option<String>,
    /// `user`, `uid`, `user:group` or `uid:gid`.
    #[serde(rename = "User", default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(rename = "Labels", default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// `port/proto` keys, each with an empty object (EXPOSE): recorded, never published.
    #[serde(
        rename = "ExposedPorts",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(
        rename = "StopSignal",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_signal: Option<String>,
}

impl ConfigFile {
    pub fn parse(bytes: &[u8]) -> Result<ConfigFile, ImageError> {
        let c: ConfigFile = serde_json::from_slice(bytes)
            .map_err(|e| ImageError::format("image config", e.to_string()))?;
        if !c.rootfs.kind.is_empty() && c.rootfs.kind != "layers" {
            return Err(ImageError::Unsupported(format!(
                "rootfs type {:?} (only \"layers\")",
                c.rootfs.kind.chars().take(40).collect::<String>()
            )));
        }
        Ok(c)
    }

    pub fn platform(&self) -> Platform {
        Platform {
            architecture: self.architecture.clone(),
            os: self.os.clone(),
            variant: self.variant.clone(),
        }
    }
}

/// Whether a layer's media type is one cordon unpacks (plain, gzip or zstd tar; Docker's and
/// OCI's names, and the non-distributable variants).
pub fn is_layer(media_type: &str) -> bool {
    media_type.is_empty()
        || media_type.starts_with(OCI_LAYER)
        || media_type.starts_with("application/vnd.oci.image.layer.nondistributable.v1.tar")
        || media_type.starts_with("application/vnd.docker.image.rootfs.diff.tar")
        || media_type.starts_with("application/vnd.docker.image.rootfs.foreign.diff.tar")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platforms_are_lower_case_os_arch_and_an_optional_variant() {
        let p = Platform::parse("linux/arm64/v8").unwrap();
        assert_eq!((p.os.as_str(), p.architecture.as_str()), ("linux", "arm64"));
        assert_eq!(p.variant.as_deref(), Some("v8"));
        assert_eq!(
            Platform::parse("linux/x86_64").unwrap().to_string(),
            "linux/x86_64"
        );
        for bad in [
            "",
            "linux",
            "LINUX/amd64",
            "linux/AMD64",
            "linux//v8",
            "linux/amd64/",
            "/amd64",
            "linux/amd64/v8/x",
            "linux/amd 64",
            "li_nux/amd64",
            "linux/amd64/v_8",
            "linux/ärm",
        ] {
            let e = Platform::parse(bad).unwrap_err();
            assert!(matches!(e, ImageError::InvalidPlatform(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains("in lower case"), "{e}");
        }
    }
}
