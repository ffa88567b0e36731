//! libFuzzer's entry for `tls_sni`: the body and its invariants are `cordon_fuzz::net::tls_sni`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::net::tls_sni(data));
