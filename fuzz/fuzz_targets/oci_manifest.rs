//! libFuzzer's entry for `oci_manifest`: the body and its invariants are `cordon_fuzz::image::oci_manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::image::oci_manifest(data));
