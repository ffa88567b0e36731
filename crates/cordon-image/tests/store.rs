//! The store through its public API, with images written as OCI layouts by the test: what the
//! engine gets from `resolve`, sharing of layers, leases against prune, and caps per image.

use std::io::Write;
use std::path::Path;

use cordon_image::unpack::Limits;
use cordon_image::{import, Digest, ImageError, ImportOptions, Quiet, Store};

fn layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, *data).expect("append");
    }
    let tar = b.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("gzip");
    gz.finish().expect("gzip")
}

fn put(dir: &Path, bytes: &[u8]) -> (String, usize) {
    let d = Digest::of(bytes);
    std::fs::write(dir.join("blobs/sha256").join(d.hex()), bytes).expect("blob");
    (d.to_string(), bytes.len())
}

/// An OCI layout with one image of `layers` (gzip blobs), tagged `tag`.
fn layout(dir: &Path, tag: &str, layers: &[Vec<u8>], env: &str) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).expect("layout");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
        .expect("oci-layout");
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for l in layers {
        let (d, n) = put(dir, l);
        descs.push(serde_json::json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": n}));
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&l[..]), &mut raw)
            .expect("gunzip");
        diff_ids.push(Digest::of(&raw).to_string());
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": [env], "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"], "WorkingDir": "/srv", "User": "1000:1000"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .expect("config");
    let (cd, cn) = put(dir, &config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
        "layers": descs,
    }))
    .expect("manifest");
    let (md, mn) = put(dir, &manifest);
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mn,
         "annotations": {"org.opencontainers.image.ref.name": tag}}]});
    std::fs::write(dir.join("index.json"), index.to_string()).expect("index");
}

#[test]
fn resolve_gives_the_engine_lower_dirs_and_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = layer(&[("etc/os", b"base\n"), ("bin/tool", b"v1")]);
    let top = layer(&[("bin/tool", b"v2"), ("app/main", b"main")]);
    layout(&tmp.path().join("a"), "1", &[base.clone(), top], "A=1");
    layout(&tmp.path().join("b"), "1", &[base], "B=2");
    let store = Store::open(&tmp.path().join("data")).expect("store");
    let a = import(
        &store,
        &tmp.path().join("a"),
        &ImportOptions::default(),
        &Quiet,
    )
    .expect("a");
    let b = import(
        &store,
        &tmp.path().join("b"),
        &ImportOptions::default(),
        &Quiet,
    )
    .expect("b");
    assert_eq!(a[0].names, ["localhost/a:1"]);
    // The base layer is stored once and shared.
    assert_eq!(a[0].record.layers[0].diff_id, b[0].record.layers[0].diff_id);

    let root = store.resolve("localhost/a:1").expect("resolve");
    assert_eq!(root.digest.as_ref(), Some(&a[0].record.digest));
    assert_eq!(root.reference, "localhost/a:1");
    assert_eq!(root.lower_dirs.len(), 2);
    // Top first, as overlayfs' lowerdir wants them.
    assert_eq!(
        std::fs::read(root.lower_dirs[0].join("bin/tool")).expect("top"),
        b"v2"
    );
    assert_eq!(
        std::fs::read(root.lower_dirs[1].join("bin/tool")).expect("base"),
        b"v1"
    );
    assert_eq!(root.config.env.as_deref(), Some(&["A=1".to_string()][..]));
    assert_eq!(
        root.config.entrypoint.as_deref(),
        Some(&["/bin/sh".to_string(), "-c".to_string()][..])
    );
    assert_eq!(
        root.config.cmd.as_deref(),
        Some(&["echo hi".to_string()][..])
    );
    assert_eq!(root.config.working_dir.as_deref(), Some("/srv"));
    assert_eq!(root.config.user.as_deref(), Some("1000:1000"));

    // While `root` lives, prune leaves its layers alone even once no image names them.
    let removed = store.remove("localhost/a:1").expect("rm");
    let collected = removed.collected.expect("collected");
    assert_eq!(collected.layers_in_use, 1, "a's top layer is held");
    assert!(root.lower_dirs[0].join("bin/tool").exists());
    drop(root);
    let pruned = store.prune().expect("prune");
    assert_eq!(pruned.layers, 1);
    // b still resolves: the shared base layer stayed.
    let rb = store.resolve("localhost/b:1").expect("b");
    assert_eq!(
        std::fs::read(rb.lower_dirs[0].join("etc/os")).expect("base"),
        b"base\n"
    );

    // A plain directory is an image too.
    let dir = store
        .resolve(tmp.path().join("a").to_str().expect("utf-8"))
        .expect("dir");
    assert_eq!(dir.digest, None);
    assert_eq!(dir.lower_dirs.len(), 1);
}

#[test]
fn the_cap_counts_the_whole_image() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let big = vec![1u8; 600 << 10];
    let l1 = layer(&[("a", &big)]);
    let l2 = layer(&[("b", &big)]);
    layout(&tmp.path().join("x"), "1", &[l1, l2], "X=1");
    let store = Store::open(&tmp.path().join("data")).expect("store");
    let opts = ImportOptions {
        limits: Limits {
            max_bytes: 1 << 20,
            ..Limits::default()
        },
        ..ImportOptions::default()
    };
    // Each layer fits alone; both do not.
    let e = import(&store, &tmp.path().join("x"), &opts, &Quiet).expect_err("over the cap");
    assert!(matches!(e, ImageError::Limit(_)), "{e}");
    assert!(store.list().expect("list").is_empty());
    assert!(import(
        &store,
        &tmp.path().join("x"),
        &ImportOptions::default(),
        &Quiet
    )
    .is_ok());
}

#[test]
fn a_layout_with_a_tampered_blob_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let l = layer(&[("a", b"data")]);
    let dir = tmp.path().join("t");
    layout(&dir, "1", std::slice::from_ref(&l), "T=1");
    let d = Digest::of(&l);
    let mut bad = l.clone();
    let n = bad.len();
    bad[n - 9] ^= 0xff;
    std::fs::write(dir.join("blobs/sha256").join(d.hex()), &bad).expect("tamper");
    let store = Store::open(&tmp.path().join("data")).expect("store");
    let e = import(&store, &dir, &ImportOptions::default(), &Quiet).expect_err("tampered");
    assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
    assert!(store.list().expect("list").is_empty());
}
