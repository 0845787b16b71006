//! libFuzzer target `sql_parser` (see `crates/cairn/tests/fuzz/targets.rs`).
#![no_main]

#[path = "../../crates/cairn/tests/fuzz/targets.rs"]
#[allow(dead_code)]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::sql_parser(data));
