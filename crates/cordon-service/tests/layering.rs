//! The layering rule, checked on the manifests and sources: doors (`cordon-server`) reach
//! the engine only through the service, and the service speaks no wire protocol. A door that
//! imports `cordon-linux`, or a service that depends on axum, MCP or an HTTP stack, fails here
//! before review has to catch it.

use std::path::{Path, PathBuf};

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/")
        .join(name)
}

fn dependencies(name: &str) -> toml::Table {
    let text = std::fs::read_to_string(crate_dir(name).join("Cargo.toml")).expect("manifest");
    let manifest: toml::Table = toml::from_str(&text).expect("manifest parses");
    manifest
        .get("dependencies")
        .and_then(|d| d.as_table())
        .cloned()
        .unwrap_or_default()
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                out.push((p, text));
            }
        }
    }
    out
}

#[test]
fn doors_do_not_import_the_engine() {
    let deps = dependencies("cordon-server");
    assert!(
        !deps.contains_key("cordon-linux"),
        "cordon-server depends on cordon-linux: a door must go through cordon-service"
    );
    for (path, text) in sources(&crate_dir("cordon-server").join("src")) {
        assert!(
            !text.contains("cordon_linux"),
            "{} names cordon_linux: a door must go through cordon-service",
            path.display()
        );
    }
}

#[test]
fn the_service_speaks_no_wire_protocol() {
    let deps = dependencies("cordon-service");
    for wire in [
        "axum",
        "axum-core",
        "utoipa",
        "utoipa-axum",
        "rmcp",
        "tower",
        "hyper",
        "reqwest",
    ] {
        assert!(
            !deps.contains_key(wire),
            "cordon-service depends on {wire}: protocols belong to the doors (cordon-server)"
        );
    }
    for (path, text) in sources(&crate_dir("cordon-service").join("src")) {
        for wire in ["axum::", "rmcp::", "StatusCode", "tower::", "utoipa"] {
            assert!(
                !text.contains(wire),
                "{} uses {wire}: the service knows no wire protocol (OpenAPI schemas are the \
                 native door's: cordon-server/src/native/schema.rs)",
                path.display()
            );
        }
    }
}

#[test]
fn unsafe_lives_in_the_engine_and_one_named_function_of_the_wasm_runtime() {
    let root = crate_dir("");
    for e in std::fs::read_dir(&root).expect("crates/").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let manifest = std::fs::read_to_string(e.path().join("Cargo.toml")).unwrap_or_default();
        assert!(
            manifest.contains("[lints]") || manifest.contains("[lints.rust]"),
            "{name} has no [lints] table: every crate takes the workspace's lints"
        );
        if name == "cordon-linux" {
            continue;
        }
        let allows: Vec<String> = sources(&e.path().join("src"))
            .into_iter()
            .flat_map(|(p, t)| {
                t.lines()
                    .filter(|l| l.contains("allow(unsafe_code)"))
                    .map(|l| format!("{}: {}", p.display(), l.trim()))
                    .collect::<Vec<_>>()
            })
            .collect();
        if name == "cordon-wasm" {
            assert_eq!(
                allows.len(),
                1,
                "cordon-wasm: one function may use unsafe: {allows:?}"
            );
            assert!(allows[0].contains("engine.rs"), "{allows:?}");
        } else {
            assert!(allows.is_empty(), "{name} allows unsafe: {allows:?}");
            assert!(
                !manifest.contains("unsafe_code = \"allow\""),
                "{name} allows unsafe in its manifest"
            );
        }
    }
}
