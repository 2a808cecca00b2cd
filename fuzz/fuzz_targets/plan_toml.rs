#![no_main]
//! Fuzz target `plan_toml`: see `warden_store::fuzzing::plan_toml`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::plan_toml(data));
