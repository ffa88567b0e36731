//! Test modules, compiled from C in the test with Debian's clang and wasi-libc (packages
//! clang, lld, wasi-libc, libclang-rt-dev-wasm32; scripts/test.sh installs them).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!(
        "cordon-wasm-test-{name}-{}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles C source to a WASI command; panics with what to install when the toolchain is
/// missing.
pub fn compile_c(name: &str, source: &str) -> PathBuf {
    let dir = scratch(&format!("cc-{name}"));
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(format!("{name}.wasm"));
    let result = Command::new("clang")
        .args(["--target=wasm32-wasi", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "clang: {e}: install clang lld wasi-libc libclang-rt-dev-wasm32 \
                 (scripts/test.sh does)"
            )
        });
    assert!(
        result.status.success(),
        "clang failed (are wasi-libc and libclang-rt-dev-wasm32 installed?): {}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// The many-mode test tool (tests/common/tool.c), built once per test binary.
pub fn tool_path() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| compile_c("tool", include_str!("tool.c")))
}

pub fn tool() -> Vec<u8> {
    std::fs::read(tool_path()).unwrap()
}

/// A WASI command that imports a function no host provides.
pub fn unknown_import_path() -> &'static Path {
    static M: OnceLock<PathBuf> = OnceLock::new();
    M.get_or_init(|| {
        compile_c(
            "imports",
            r#"
__attribute__((import_module("cordon_test"), import_name("launch_missiles")))
extern int launch_missiles(int);
int main(void) { return launch_missiles(1); }
"#,
        )
    })
}
