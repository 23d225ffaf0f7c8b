//! `cargo +nightly fuzz run ib_private`: see `checks::ib_private` for the input format and the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ib_private(data));
