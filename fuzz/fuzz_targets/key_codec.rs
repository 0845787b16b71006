//! libFuzzer target `key_codec` (see `crates/cairn/tests/fuzz/targets.rs`).
#![no_main]

#[path = "../../crates/cairn/tests/fuzz/targets.rs"]
#[allow(dead_code)]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::key_codec(data));
