//! The wasmtime engine as cordon configures it, and turning bytes into runnable code.

use wasmtime::component::Component;
use wasmtime::{Config, Engine, Module};

use crate::WasmError;

/// A core WebAssembly module (WASI preview 1) or a component (WASI preview 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Module,
    Component,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Component => "component",
        }
    }
}

/// `\0asm`, the first four bytes of every WebAssembly binary.
pub const MAGIC: [u8; 4] = cordon_policy::wasm::MAGIC;

/// True when `head` (a file's first bytes, at least four) starts like a WebAssembly binary.
pub fn is_wasm(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

/// Module or component, from the binary's header: after the magic, a 16-bit version and a
/// 16-bit layer (0 for a core module, 1 for a component). `None` when it is neither.
pub fn detect(bytes: &[u8]) -> Option<Kind> {
    if !is_wasm(bytes) || bytes.len() < 8 {
        return None;
    }
    match [bytes[6], bytes[7]] {
        [0, 0] => Some(Kind::Module),
        [1, 0] => Some(Kind::Component),
        _ => None,
    }
}

/// Stack the guest may use, in bytes (wasmtime's default is 512 KiB). Recursion past it is a
/// `call stack exhausted` trap, never a crash of the runtime.
const MAX_WASM_STACK: usize = 1 << 20;

/// What [`new_engine`] sets, as it enters the compiled-code cache key (with wasmtime's
/// version and the target): the supervisor names an entry without building an `Engine`
/// (~40 ms of a debug run). Change it with the settings. An artifact that still does not fit
/// (another CPU's features, say) is refused by wasmtime's own check on load and recompiled.
pub fn settings() -> String {
    format!(
        "epoch_interruption;max_wasm_stack={MAX_WASM_STACK};async_stack={};features=default",
        MAX_WASM_STACK + (2 << 20)
    )
}

/// The engine every run uses. Its settings are part of the compiled-code cache key (see
/// [`settings`]), so a change here never meets old artifacts.
pub fn new_engine() -> Result<Engine, WasmError> {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.max_wasm_stack(MAX_WASM_STACK);
    // The async fiber's stack holds the guest's stack and the host calls it makes.
    c.async_stack_size(MAX_WASM_STACK + (2 << 20));
    // No `threads` feature is compiled in: a guest has one thread, whose CPU clock is the
    // one the CPU-time limit reads.
    Engine::new(&c).map_err(|e| WasmError::Engine(e.to_string()))
}

/// Code ready to instantiate.
pub enum Program {
    Module(Module),
    Component(Component),
}

/// Compiles `bytes`. The message says what is wrong with the binary in wasmtime's words
/// (a truncated or corrupted module names the section and offset).
pub fn compile(engine: &Engine, kind: Kind, bytes: &[u8]) -> Result<Program, String> {
    match kind {
        Kind::Module => Module::new(engine, bytes)
            .map(Program::Module)
            .map_err(|e| format!("not a valid WebAssembly module: {}", chain(&e))),
        Kind::Component => Component::new(engine, bytes)
            .map(Program::Component)
            .map_err(|e| format!("not a valid WebAssembly component: {}", chain(&e))),
    }
}

/// The compiled artifact of `program`, for the cache.
pub fn serialize(program: &Program) -> Option<Vec<u8>> {
    match program {
        Program::Module(m) => m.serialize().ok(),
        Program::Component(c) => c.serialize().ok(),
    }
}

/// Loads a compiled artifact. `None` when wasmtime refuses it (made by another version or for
/// another CPU): the caller compiles instead.
///
/// Only for bytes that this crate's own compile step produced, which the caller proves: the
/// cache checks their HMAC with a key that never leaves the host side (see `cache`), and the
/// confined runtime gets them from the supervisor that checked them.
#[allow(unsafe_code)] // the crate's one unsafe function: see Cargo.toml
pub fn deserialize_trusted(engine: &Engine, kind: Kind, artifact: &[u8]) -> Option<Program> {
    match kind {
        // SAFETY: `Module::deserialize` turns the bytes into native code without validating
        // them, so they must come from `Module::serialize` of a compatible engine. They do:
        // the caller holds them only after checking their HMAC (a key only cordon's host side
        // reads) or receiving them from the supervisor that did; wasmtime itself still checks
        // the header's version and engine settings and refuses a mismatch.
        Kind::Module => unsafe { Module::deserialize(engine, artifact) }
            .ok()
            .map(Program::Module),
        // SAFETY: as for the module above: HMAC-checked output of `Component::serialize`.
        Kind::Component => unsafe { Component::deserialize(engine, artifact) }
            .ok()
            .map(Program::Component),
    }
}

/// An error with its causes, on one line.
pub fn chain(e: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        assert_eq!(detect(b"\0asm\x01\0\0\0rest"), Some(Kind::Module));
        assert_eq!(detect(b"\0asm\x0d\0\x01\0rest"), Some(Kind::Component));
        assert_eq!(detect(b"\0asm\x01\0"), None);
        assert_eq!(detect(b"\x7fELF\x02\x01\x01\0"), None);
        assert!(is_wasm(b"\0asm"));
        assert!(!is_wasm(b"\0as"));
    }
}
