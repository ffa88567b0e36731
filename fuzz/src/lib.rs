//! The bodies of cordon's fuzz targets: one function per parser of hostile input, each
//! asserting the invariant that parser exists to keep (not only "no panic"). libFuzzer drives
//! them from `fuzz_targets/` (nightly, `scripts/fuzz.sh`); the corpus replay below runs every
//! file of `corpus/<target>/` through them on stable (scripts/test.sh), so each finding, kept
//! in its corpus, stays a regression test.
//!
//! Threat model: every input is what a hostile registry, image, sandboxed program, SDK client
//! or configuration file could send. A panic here is a finding: either a crash of the product
//! (a denial of service at least) or a broken invariant (an escape, a smuggled request, an
//! unbounded allocation).

pub mod gateway;
pub mod image;
pub mod net;
pub mod policy;
pub mod server;

/// A target's body: panics when the input breaks an invariant.
pub type Body = fn(&[u8]);

/// Every target: its name (the `fuzz_targets/<name>.rs` binary and the `corpus/<name>/`
/// directory) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("tar_unpack", image::tar_unpack),
    ("oci_manifest", image::oci_manifest),
    ("registry_challenge", image::registry_challenge),
    ("image_reference", image::image_reference),
    ("egress_allow", policy::egress_allow),
    ("profile_toml", policy::profile_toml),
    ("wasm_header", policy::wasm_header),
    ("http_request", net::http_request),
    ("tls_sni", net::tls_sni),
    ("connect_envelope", server::connect_envelope),
    ("mcp_framing", server::mcp_framing),
    ("upload_body", server::upload_body),
    ("gateway_toml", gateway::gateway_toml),
    ("gateway_path", gateway::gateway_path),
];

/// The input as text, lossily: most parsers here take `&str` from a front end that has
/// already refused invalid UTF-8 or replaced it.
pub(crate) fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Splits the input at the first `\n`: two fields of one case (an entry and a probe, say).
pub(crate) fn split2(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

#[cfg(test)]
mod replay {
    use std::path::Path;

    /// Every corpus file of every target, run through its body: seeds and findings alike.
    #[test]
    fn every_corpus_file_keeps_its_targets_invariants() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
        let mut total = 0;
        let mut broken = Vec::new();
        for (name, body) in super::TARGETS {
            let dir = corpus.join(name);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| e.expect("corpus entry").path())
                .collect();
            files.sort();
            assert!(!files.is_empty(), "{name} has no seed in {}", dir.display());
            for f in &files {
                let data = std::fs::read(f).expect("corpus file");
                if std::panic::catch_unwind(|| body(&data)).is_err() {
                    broken.push(format!("{name}: {}", f.display()));
                }
                total += 1;
            }
            println!("{name}: {} inputs", files.len());
        }
        println!("{total} corpus inputs replayed");
        assert!(
            broken.is_empty(),
            "inputs that break their target:\n{}",
            broken.join("\n")
        );
    }

    /// Each target has its libFuzzer binary, and no binary is left without a body.
    #[test]
    fn every_target_has_its_fuzz_binary() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
        let mut bins: Vec<String> = std::fs::read_dir(&dir)
            .expect("fuzz_targets")
            .map(|e| {
                let p = e.expect("entry").path();
                p.file_stem().expect("stem").to_string_lossy().into_owned()
            })
            .collect();
        bins.sort();
        let mut names: Vec<String> = super::TARGETS.iter().map(|(n, _)| n.to_string()).collect();
        names.sort();
        assert_eq!(bins, names);
    }
}
