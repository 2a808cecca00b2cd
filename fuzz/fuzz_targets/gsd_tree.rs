#![no_main]
//! Fuzz target `gsd_tree`: see `warden_store::fuzzing::gsd_tree`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::gsd_tree(data));
