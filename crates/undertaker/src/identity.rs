//! Who a process is, in terms that survive PID reuse.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A process as the kernel identified it when we looked: a pid alone proves nothing,
/// so the starttime (exact /proc field 22) and the boot travel with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub boot_id: String,
    pub pid: i32,
    pub starttime: u64,
    pub pgid: i32,
    pub sid: i32,
    pub uid: u32,
    /// pidfs inode of a pidfd (Linux ≥ 6.9): unique for the boot, never recycled.
    pub pidfs_inode: Option<u64>,
}

/// A guarded tree's id: 24 random hex digits, then 8 of the boot id, so a process
/// carrying it in `UNDERTAKER_TREE` can only have inherited it from that tree. The
/// random part comes first: every prefix a person types or reads (`kill abcd`, the
/// 12 characters `log` shows) is random, not the same boot id for every tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TreeId(String);

/// Environment variable every guarded process carries.
pub const TREE_MARKER: &str = "UNDERTAKER_TREE";

impl TreeId {
    pub const LEN: usize = 32;

    /// Builds a fresh id from 12 random bytes and the boot id.
    pub fn generate(boot_id: &str, random: [u8; 12]) -> Self {
        let mut s = String::with_capacity(Self::LEN);
        for b in random {
            s.push_str(&format!("{b:02x}"));
        }
        let boot: String = boot_id
            .chars()
            .filter(|c| c.is_ascii_hexdigit())
            .take(8)
            .collect();
        s.push_str(&boot);
        while s.len() < Self::LEN {
            s.push('0');
        }
        Self(s.to_ascii_lowercase())
    }

    /// Accepts exactly 32 lowercase hex digits; anything else is not a tree id.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TreeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back() {
        let id = TreeId::generate("4f1c2a3b-0000-1111-2222-333344445555", [0xab; 12]);
        assert_eq!(id.as_str().len(), TreeId::LEN);
        assert!(id.as_str().starts_with(&"ab".repeat(12)));
        assert!(id.as_str().ends_with("4f1c2a3b"));
        assert_eq!(TreeId::parse(id.as_str()), Some(id));
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in ["", "xyz", &"A".repeat(32), &"a".repeat(31), &"a".repeat(33)] {
            assert_eq!(TreeId::parse(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in ".*") {
            let _ = TreeId::parse(&s);
        }
    }
}
