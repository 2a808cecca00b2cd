#![no_main]
//! Fuzz target `tree_apply`: see `warden_store::fuzzing::tree_apply`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::tree_apply(data));
