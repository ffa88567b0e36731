//! libFuzzer's entry for `gateway_toml`: the body and its invariants are `cordon_fuzz::gateway::gateway_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::gateway::gateway_toml(data));
