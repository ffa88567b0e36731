//! libFuzzer's entry for `wasm_header`: the body and its invariants are `cordon_fuzz::policy::wasm_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::policy::wasm_header(data));
