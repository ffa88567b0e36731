//! libFuzzer's entry for `connect_envelope`: the body and its invariants are `cordon_fuzz::server::connect_envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::server::connect_envelope(data));
