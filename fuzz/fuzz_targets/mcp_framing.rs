//! libFuzzer's entry for `mcp_framing`: the body and its invariants are `cordon_fuzz::server::mcp_framing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cordon_fuzz::server::mcp_framing(data));
