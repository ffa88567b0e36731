//! libFuzzer's entry for `gateway_path`: the body and its invariants are `cordon_fuzz::gateway::gateway_path`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::gateway::gateway_path(data));
