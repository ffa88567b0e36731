//! Image pulls: layer tars, manifests and indexes, registry auth challenges and image
//! references — all from a registry or an archive the user did not write.

use std::collections::{BTreeSet, HashSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use cordon_image::oci::{ConfigFile, Document, Platform};
use cordon_image::reference::Reference;
use cordon_image::unpack::{unpack_layer, Budget, Limits};

const CANARY: &[u8] = b"the host's own file\n";

/// A layer blob (plain, gzip or zstd tar) unpacked into `<tmp>/root`, beside `<tmp>/canary`:
/// whatever the layer says, nothing appears, changes or gets linked outside `root`; inside
/// it there is no device node and no setuid/setgid file, and regular files stay within the
/// byte budget.
pub fn tar_unpack(data: &[u8]) {
    let base = tempfile::tempdir().expect("temp dir");
    let root = base.path().join("root");
    let canary = base.path().join("canary");
    std::fs::create_dir(&root).expect("root");
    std::fs::create_dir(&canary).expect("canary");
    std::fs::write(canary.join("file"), CANARY).expect("canary file");
    let canary_before = std::fs::symlink_metadata(canary.join("file")).expect("canary");
    let limits = Limits {
        max_bytes: 4 << 20,
        max_entries: 4096,
        max_depth: 64,
    };
    let budget = Budget::new(limits.max_bytes, 0);
    let report = unpack_layer(data, &root, &limits, &budget, None);

    // Outside the root: exactly what was there.
    let mut beside: Vec<String> = std::fs::read_dir(base.path())
        .expect("base")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(
        beside,
        ["canary", "root"],
        "the layer wrote beside its root"
    );
    let in_canary: Vec<_> = std::fs::read_dir(&canary)
        .expect("canary")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        in_canary,
        ["file"],
        "the layer wrote into a sibling directory"
    );
    let after = std::fs::symlink_metadata(canary.join("file")).expect("canary");
    assert!(after.file_type().is_file(), "the canary was replaced");
    assert_eq!(
        after.nlink(),
        1,
        "the layer hard-linked the canary into its root"
    );
    assert_eq!(
        after.mode(),
        canary_before.mode(),
        "the canary's mode changed"
    );
    assert_eq!(
        after.uid(),
        canary_before.uid(),
        "the canary's owner changed"
    );
    assert_eq!(
        std::fs::read(canary.join("file")).expect("canary"),
        CANARY,
        "the canary's content changed"
    );
    let root_meta = std::fs::symlink_metadata(&root).expect("root");
    assert!(root_meta.is_dir(), "the root was replaced");

    // Inside: what the unpacker promises.
    let mut inodes = HashSet::new();
    let mut bytes = 0u64;
    walk(&root, &mut inodes, &mut bytes);
    assert!(
        bytes <= limits.max_bytes,
        "{bytes} bytes unpacked, over the {} cap",
        limits.max_bytes
    );
    if let Ok(r) = report {
        assert!(r.bytes <= limits.max_bytes);
        assert!(r.entries <= limits.max_entries);
    }
    // An unpacked tree may hold directories of mode 0: let the temp dir go as root does.
    make_removable(&root);
}

fn walk(dir: &Path, inodes: &mut HashSet<(u64, u64)>, bytes: &mut u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("entry").path();
        let m = std::fs::symlink_metadata(&path).expect("metadata");
        let t = m.file_type();
        assert!(
            !t.is_char_device() && !t.is_block_device(),
            "device node unpacked: {}",
            path.display()
        );
        assert!(!t.is_socket(), "socket unpacked: {}", path.display());
        if t.is_file() {
            assert_eq!(
                m.mode() & 0o6000,
                0,
                "setuid/setgid kept: {}",
                path.display()
            );
            if inodes.insert((m.dev(), m.ino())) {
                *bytes += m.len();
            }
        } else if t.is_dir() {
            walk(&path, inodes, bytes);
        }
    }
}

fn make_removable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_removable(&e.path());
            }
        }
    }
}

const MEDIA_TYPES: &[Option<&str>] = &[
    None,
    Some("application/vnd.oci.image.manifest.v1+json"),
    Some("application/vnd.oci.image.index.v1+json"),
    Some("application/vnd.docker.distribution.manifest.v2+json"),
    Some("application/vnd.docker.distribution.manifest.list.v2+json"),
    Some("text/plain"),
];

/// A manifest, index or image config from a registry: the first byte picks the
/// `Content-Type` the registry claimed. Every digest that comes out names a store path of
/// one shape (`sha256:<64 hex>`: nothing that could climb or split a path), a selected index
/// entry is one of the index's own and fits the platform asked for, and platforms round-trip.
pub fn oci_manifest(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let header = MEDIA_TYPES[usize::from(pick) % MEDIA_TYPES.len()];
    let wants = [
        Platform::host(),
        Platform::parse("linux/arm64/v8").expect("platform"),
        Platform::parse("linux/arm/v7").expect("platform"),
    ];
    match Document::parse(body, header) {
        Ok(Document::Index(index)) => {
            for d in &index.manifests {
                check_digest(&d.digest.to_string());
            }
            for want in &wants {
                if let Ok(d) = index.select(want, "fuzz") {
                    assert!(index.manifests.iter().any(|m| std::ptr::eq(m, d)));
                    match &d.platform {
                        Some(p) => {
                            assert_eq!((&p.os, &p.architecture), (&want.os, &want.architecture))
                        }
                        None => assert_eq!(index.manifests.len(), 1),
                    }
                }
            }
        }
        Ok(Document::Manifest(m)) => {
            check_digest(&m.config.digest.to_string());
            for l in &m.layers {
                check_digest(&l.digest.to_string());
                let _ = cordon_image::oci::is_layer(&l.media_type);
            }
        }
        Err(_) => {}
    }
    if let Ok(config) = ConfigFile::parse(body) {
        let p = config.platform();
        if let Ok(again) = Platform::parse(&p.to_string()) {
            assert_eq!(again, p);
        }
    }
    let text = crate::text(body);
    if let Ok(p) = Platform::parse(&text) {
        assert_eq!(p.to_string(), text, "a platform does not print as written");
        assert_eq!(Platform::parse(&p.to_string()).expect("reparse"), p);
    }
}

fn check_digest(d: &str) {
    let hex = d.strip_prefix("sha256:").expect("a digest is sha256:<hex>");
    assert_eq!(hex.len(), 64, "digest {d:?}");
    assert!(
        hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "digest {d:?}"
    );
}

/// A `WWW-Authenticate` header from a registry: parsed without panicking, the scheme is one
/// token, and the parameters survive being written back (quoted, escaped) and read again —
/// what the token request is built from is what the registry sent.
pub fn registry_challenge(data: &[u8]) {
    let text = crate::text(data);
    let Some((scheme, params)) = cordon_image::pull::parse_challenge_for_fuzzing(&text) else {
        return;
    };
    assert!(!scheme.contains(' '), "scheme {scheme:?}");
    assert_eq!(scheme, scheme.to_ascii_lowercase());
    for (k, _) in &params {
        assert_eq!(*k, k.to_ascii_lowercase());
    }
    // Written back: only parameters whose keys the parser can read back as written.
    let writable = !scheme.is_empty()
        && !scheme.contains(['"', '=', ','])
        && scheme.trim() == scheme
        && params.iter().all(|(k, _)| {
            !k.is_empty()
                && k.trim() == k
                && !k.contains(['=', ',', ' ', '"'])
                && !k.starts_with([' ', ','])
        });
    if writable {
        let mut header = scheme.clone();
        for (i, (k, v)) in params.iter().enumerate() {
            header.push_str(if i == 0 { " " } else { "," });
            let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
            header.push_str(&format!("{k}=\"{escaped}\""));
        }
        let again = cordon_image::pull::parse_challenge_for_fuzzing(&header)
            .unwrap_or_else(|| panic!("{header:?} no longer parses"));
        assert_eq!(again, (scheme, params), "{header:?}");
    }
}

/// An image reference as a user, a Dockerfile's `FROM` or a compose file writes it: a parsed
/// reference prints in a form that parses back to the same reference (so what is stored under
/// a name is found under it again), in both its full and its familiar form, and its registry
/// and repository hold nothing that could split a URL or a store path.
pub fn image_reference(data: &[u8]) {
    let text = crate::text(data);
    let Ok(r) = Reference::parse(&text) else {
        return;
    };
    let full = r.to_string();
    let again = Reference::parse(&full).unwrap_or_else(|e| panic!("{full:?} fails: {e}"));
    assert_eq!(again, r, "{text:?} -> {full:?}");
    let familiar = r.familiar();
    let again = Reference::parse(&familiar).unwrap_or_else(|e| panic!("{familiar:?} fails: {e}"));
    assert_eq!(again, r, "{text:?} -> familiar {familiar:?}");
    assert!(!r.registry.is_empty());
    assert!(!r.registry.contains(['/', '@', '?', '#', ' ']));
    for c in r.repository.split('/') {
        assert!(!c.is_empty() && c != "." && c != "..", "{:?}", r.repository);
    }
    let chars: BTreeSet<char> = r.repository.chars().collect();
    assert!(chars
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(*c)));
}
