//! `cargo +nightly fuzz run stream`: see `checks::stream` for the input format and the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::stream(data));
