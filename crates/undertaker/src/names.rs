//! `names!`: one table of names for a fieldless enum (its `as_str` and `Display`).
//! Ground floor: the registry and the reports both use it, and neither imports it
//! from the other.

/// Implements `as_str` and `Display` for a fieldless enum from one table of names,
/// which must match its serde names.
macro_rules! names {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use names;
