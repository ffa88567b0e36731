//! libFuzzer's entry for `profile_toml`: the body and its invariants are `cordon_fuzz::policy::profile_toml`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::policy::profile_toml(data));
