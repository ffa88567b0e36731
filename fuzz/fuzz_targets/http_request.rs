//! libFuzzer's entry for `http_request`: the body and its invariants are `cordon_fuzz::net::http_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::net::http_request(data));
