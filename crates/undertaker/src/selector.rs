//! Naming a tree on the command line: its id or a unique prefix of at least four hex
//! digits, else its label ([`crate::history::trees_named`]). One rule for `kill` and
//! `log --tree`.

use crate::identity::TreeId;

/// Why a tree selector picked no tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    #[error("{0:?} is not a tree id (give at least 4 hex digits of one)")]
    BadId(String),
    #[error("no tree with id {0}")]
    Unknown(String),
    #[error("{0} matches several trees: {1}")]
    Ambiguous(String, String),
    #[error("no tree has the id, id prefix or label {0:?}")]
    NoTree(String),
    #[error(
        "label {0:?} names several live trees ({1}): give one tree id, or --all to end them all"
    )]
    SeveralLabelled(String, String),
    #[error("no live tree has the label {0:?}")]
    NoLiveLabelled(String),
}

/// A tree id or a prefix of one, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeSelector(String);

impl TreeSelector {
    /// Shortest prefix accepted: shorter ones would match by accident.
    pub const MIN_LEN: usize = 4;

    pub fn parse(s: &str) -> Result<Self, SelectError> {
        let hex = s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if s.len() < Self::MIN_LEN || s.len() > TreeId::LEN || !hex {
            return Err(SelectError::BadId(s.into()));
        }
        Ok(Self(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, id: &str) -> bool {
        id.starts_with(&self.0)
    }

    /// The one id among `ids` (sorted, without duplicates) that this selector names.
    pub fn pick<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Result<&'a str, SelectError> {
        let found: Vec<&str> = ids.into_iter().filter(|id| self.matches(id)).collect();
        match found.as_slice() {
            [] => Err(SelectError::Unknown(self.0.clone())),
            [one] => Ok(one),
            many => Err(SelectError::Ambiguous(self.0.clone(), many.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_hex_prefixes_of_four_to_32_digits() {
        assert!(TreeSelector::parse("abcd").is_ok());
        assert!(TreeSelector::parse(&"a".repeat(32)).is_ok());
        for bad in ["abc", "ABCD", "wxyz", "ab-cd", ""] {
            assert_eq!(
                TreeSelector::parse(bad),
                Err(SelectError::BadId(bad.into()))
            );
        }
        assert!(TreeSelector::parse(&"a".repeat(33)).is_err());
    }

    #[test]
    fn pick_wants_exactly_one_match() {
        let sel = TreeSelector::parse("abcd").unwrap();
        assert_eq!(sel.pick(["abcd01", "ffff"]), Ok("abcd01"));
        assert_eq!(sel.pick(["ffff"]), Err(SelectError::Unknown("abcd".into())));
        assert_eq!(
            sel.pick(["abcd01", "abcd02"]),
            Err(SelectError::Ambiguous(
                "abcd".into(),
                "abcd01, abcd02".into()
            ))
        );
    }
}
