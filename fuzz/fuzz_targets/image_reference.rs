//! libFuzzer's entry for `image_reference`: the body and its invariants are `cordon_fuzz::image::image_reference`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::image::image_reference(data));
