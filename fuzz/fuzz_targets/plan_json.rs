#![no_main]
//! Fuzz target `plan_json`: see `warden_store::fuzzing::plan_json`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::plan_json(data));
