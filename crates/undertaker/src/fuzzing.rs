//! Entry points for the fuzz targets in `fuzz/` and for the corpus replay test.
//!
//! Each takes arbitrary bytes and panics only when an invariant breaks (a parser
//! panicking, a reply that is not one JSON line), which is what a fuzzer reports.
//! Hidden from the documented API: it exists for testing only.

use crate::protocol::framing::{Frame, LineFramer};
use crate::protocol::{parse_line, reply, MAX_LINE};

/// The supervise protocol: framing (cut at an input-chosen point), parsing, replies.
pub fn protocol(data: &[u8]) {
    let cut = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let mut whole = Vec::new();
    LineFramer::new().push(data, &mut whole);
    let mut framer = LineFramer::new();
    let mut split = Vec::new();
    framer.push(&data[..cut], &mut split);
    framer.push(&data[cut..], &mut split);
    assert_eq!(whole, split, "framing depends on read boundaries");
    assert!(framer.pending() <= MAX_LINE);
    for frame in whole {
        let Frame::Line(line) = frame else { continue };
        assert!(line.len() <= MAX_LINE && !line.contains(&b'\n'));
        match parse_line(&line) {
            Ok(_) => {}
            Err(e) => {
                let text = reply::error(&e);
                assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
                let v: serde_json::Value =
                    serde_json::from_str(&text).expect("an error reply is JSON");
                assert_eq!(v["error"]["code"], e.code.as_str());
            }
        }
    }
    // A whole input given as one line must parse or fail, never panic.
    let _ = parse_line(data);
}

/// The `/proc` parsers, each fed the same bytes.
pub fn procfs(data: &[u8]) {
    let _ = crate::identity::TreeId::parse(&String::from_utf8_lossy(data));
    #[cfg(target_os = "linux")]
    {
        use crate::linux::kernel::procfs;
        let text = String::from_utf8_lossy(data);
        if let Ok(stat) = procfs::parse_stat(&text) {
            assert!(stat.pid > 0, "parse_stat accepted pid {}", stat.pid);
        }
        let _ = procfs::parse_status_real_uid(&text);
        let _ = procfs::parse_cgroup_v2(&text);
        if let Ok(id) = procfs::parse_boot_id(&text) {
            assert_eq!(id.len(), 36);
        }
        let key_len = data.first().map_or(0, |&b| usize::from(b % 8));
        let key = String::from_utf8_lossy(&data[..key_len.min(data.len())]);
        if let Some(value) = procfs::environ_value(data, &key) {
            assert!(!key.is_empty() && value.len() < data.len());
        }
    }
}
