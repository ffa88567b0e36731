//! libFuzzer's entry for `egress_allow`: the body and its invariants are `cordon_fuzz::policy::egress_allow`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::policy::egress_allow(data));
