#![no_main]
//! Fuzz target `mcp_message`: see `warden_mcp::fuzzing::message`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_mcp::fuzzing::message(data));
