#![no_main]
//! Fuzz target `plan_yaml`: see `warden_store::fuzzing::plan_yaml`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::plan_yaml(data));
