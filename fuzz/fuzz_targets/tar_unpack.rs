//! libFuzzer's entry for `tar_unpack`: the body and its invariants are `cordon_fuzz::image::tar_unpack`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::image::tar_unpack(data));
