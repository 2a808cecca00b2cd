#![no_main]
//! Fuzz target `memory_delta`: see `warden_store::fuzzing::memory_delta`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_store::fuzzing::memory_delta(data));
