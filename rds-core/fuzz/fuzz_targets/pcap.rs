//! `cargo +nightly fuzz run pcap`: see `checks::pcap` for the input format and the properties.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::pcap(data));
