#![no_main]
// The supervise protocol: framing, parsing and error replies (docs/SUPERVISE.md).
libfuzzer_sys::fuzz_target!(|data: &[u8]| undertaker::fuzzing::protocol(data));
