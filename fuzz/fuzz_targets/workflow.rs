#![no_main]
//! Fuzz target `workflow`: see `warden_store::fuzzing::workflow`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::workflow(data));
