//! Stable text forms for the enums the journal stores as text.
//!
//! Every stored enum gets `as_str()`, `Display` and `FromStr` from one macro, so the spelling
//! written to the journal and the spelling read back can never drift apart.

use thiserror::Error;

/// A stored text value that names no variant of the enum it was read as.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown {kind} '{value}': expected one of {}", expected.join(", "))]
pub struct ParseEnumError {
    /// Which enum was being parsed (e.g. "attempt state").
    pub kind: &'static str,
    /// The text that did not match.
    pub value: String,
    /// The accepted spellings.
    pub expected: &'static [&'static str],
}

/// Defines a fieldless enum with a stable snake_case text form.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stable text form stored in the journal.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::text::ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::text::ParseEnumError {
                        kind: $kind,
                        value: s.to_owned(),
                        expected: &[$($text),+],
                    }),
                }
            }
        }
    };
}

pub(crate) use text_enum;
