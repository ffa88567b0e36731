//! libFuzzer's entry for `upload_body`: the body and its invariants are `cordon_fuzz::server::upload_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::server::upload_body(data));
