#![no_main]
// The /proc parsers: stat, status, environ, cgroup, boot_id, and tree ids.
libfuzzer_sys::fuzz_target!(|data: &[u8]| undertaker::fuzzing::procfs(data));
