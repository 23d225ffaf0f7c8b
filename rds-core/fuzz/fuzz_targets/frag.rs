//! `cargo +nightly fuzz run frag`: see `checks::frag` for the input format and the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::frag(data));
