//! A validated session id (design.md §3): 1 to 255 bytes, no control
//! characters, no invisible format characters (bidi overrides, zero-width
//! spaces and joiners), which make two ids that look alike differ.

use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

pub const MAX_SESSION_ID_BYTES: usize = 255;

/// How a session id appears in any log line: hashed (XXH3, 16 hex digits).
/// A log is no place for users' identifiers; the hash still tells one
/// session's lines apart, and the access log and the press path's own
/// lines agree on it.
pub fn logged(id: &str) -> String {
    format!("{:016x}", balancing::hash_key(id.as_bytes()))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    #[error("session_id is missing")]
    Missing,
    #[error("session_id must be a string")]
    NotAString,
    #[error("session_id must not be empty")]
    Empty,
    #[error("session_id must be at most {MAX_SESSION_ID_BYTES} bytes")]
    TooLong,
    #[error("session_id must not contain control characters")]
    ControlCharacter,
    #[error("session_id must not contain invisible format characters (bidi controls, zero-width characters)")]
    FormatCharacter,
}

impl SessionId {
    pub fn parse(id: String) -> Result<Self, SessionIdError> {
        if id.is_empty() {
            Err(SessionIdError::Empty)
        } else if id.len() > MAX_SESSION_ID_BYTES {
            Err(SessionIdError::TooLong)
        } else if id.chars().any(char::is_control) {
            Err(SessionIdError::ControlCharacter)
        } else if !id.is_ascii()
            // No ASCII character is a format character; most ids are ASCII.
            && id
                .chars()
                .any(|c| c.general_category() == GeneralCategory::Format)
        {
            Err(SessionIdError::FormatCharacter)
        } else {
            Ok(Self(id))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_and_unicode_ids_up_to_255_bytes() {
        assert!(SessionId::parse("u1".into()).is_ok());
        assert!(SessionId::parse("ünïcødé-séssion".into()).is_ok());
        assert!(SessionId::parse("x".repeat(255)).is_ok());
    }

    #[test]
    fn refuses_empty_long_and_control_character_ids() {
        assert_eq!(SessionId::parse(String::new()), Err(SessionIdError::Empty));
        assert_eq!(
            SessionId::parse("x".repeat(256)),
            Err(SessionIdError::TooLong)
        );
        // 128 two-byte characters: 128 chars but 256 bytes.
        assert_eq!(
            SessionId::parse("é".repeat(128)),
            Err(SessionIdError::TooLong)
        );
        assert_eq!(
            SessionId::parse("a\nb".into()),
            Err(SessionIdError::ControlCharacter)
        );
        assert_eq!(
            SessionId::parse("a\u{0}".into()),
            Err(SessionIdError::ControlCharacter)
        );
    }

    #[test]
    fn refuses_bidi_overrides_and_zero_width_characters() {
        for id in [
            "a\u{202E}b",
            "a\u{200B}b",
            "\u{200D}",
            "a\u{2066}b",
            "\u{FEFF}u1",
        ] {
            assert_eq!(
                SessionId::parse(id.into()),
                Err(SessionIdError::FormatCharacter),
                "{id:?}"
            );
        }
    }
}
