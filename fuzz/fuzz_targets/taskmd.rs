#![no_main]
//! Fuzz target `taskmd`: see `warden_store::fuzzing::taskmd`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::taskmd(data));
