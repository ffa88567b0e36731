//! libFuzzer's entry for `registry_challenge`: the body and its invariants are `cordon_fuzz::image::registry_challenge`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::image::registry_challenge(data));
