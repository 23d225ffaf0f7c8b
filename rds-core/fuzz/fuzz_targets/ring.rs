//! `cargo +nightly fuzz run ring`: see `checks::ring` for the input format and the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ring(data));
