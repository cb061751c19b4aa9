//! The delimiter ("structural") tag of a token, exactly as the note's analyzer computes it
//! (docs/PROTOCOL.md §5.1): `t = tok.decode([top1]).strip()`; structural iff `t == ""` (whitespace,
//! newline or indent only) or every character of `t` is one of `{ } [ ] ( ) " ' , : ; =`.
//!
//! * The set includes the single quote: the note's code has it, its text omits it (docs/PROTOCOL.md §11.6).
//! * The post-hoc "brackets-only" re-slice drops whitespace-only tokens and the single quote.
//! * `str.strip()` strips what Python's `str.isspace` calls whitespace: Unicode `White_Space`
//!   (what Rust's `char::is_whitespace` tests) plus the four information separators
//!   U+001C..U+001F, which Python counts (bidi class B/S) and Unicode does not.
//! * `tok.decode` of one token: bytes that are not valid UTF-8 on their own (a token holding part
//!   of a multi-byte character) become U+FFFD, which is not a delimiter; control tokens decode to
//!   their text (`<eos>`), which is not one either — so callers pass the token's bytes with
//!   special tokens RENDERED, never the empty string llama.cpp gives them in generated text.

/// The note's delimiter characters (with the single quote, as in its code).
pub const DELIMITER_CHARS: [char; 12] =
    ['{', '}', '[', ']', '(', ')', '"', '\'', ',', ':', ';', '='];

/// The brackets-only re-slice: no single quote (and whitespace-only tokens do not count).
pub const BRACKET_CHARS: [char; 11] = ['{', '}', '[', ']', '(', ')', '"', ',', ':', ';', '='];

/// Python's `str.isspace` for one character.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()` with no argument.
pub fn python_strip(s: &str) -> &str {
    s.trim_matches(is_python_space)
}

/// Structural (the note's tag) of a token whose decoded text is `text`.
pub fn is_delimiter(text: &str) -> bool {
    let t = python_strip(text);
    t.chars().all(|c| DELIMITER_CHARS.contains(&c))
}

/// The brackets-only re-slice: non-empty after stripping and every character in
/// [`BRACKET_CHARS`].
pub fn is_bracket_delimiter(text: &str) -> bool {
    let t = python_strip(text);
    !t.is_empty() && t.chars().all(|c| BRACKET_CHARS.contains(&c))
}

/// Both tags of a token from its bytes (invalid UTF-8 replaced, as `decode` does).
pub fn classify_bytes(bytes: &[u8]) -> Tags {
    let text = String::from_utf8_lossy(bytes);
    Tags {
        structural: is_delimiter(&text),
        bracket: is_bracket_delimiter(&text),
    }
}

/// The two delimiter tags of one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tags {
    /// The note's structural tag.
    pub structural: bool,
    /// The brackets-only re-slice.
    pub bracket: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_only_tokens_are_structural_but_not_brackets() {
        for t in ["", " ", "\n", "\n    ", "\t\t", "\u{a0}", "\u{1c}", "\r\n"] {
            assert!(is_delimiter(t), "{t:?}");
            assert!(!is_bracket_delimiter(t), "{t:?}");
        }
    }

    #[test]
    fn delimiter_runs_with_surrounding_space_are_structural() {
        for t in [
            "(", " (", "):\n", "\"", "'", "]]", " = ", "{}", ",", ";", "\"\"\"", "\n\n)",
        ] {
            assert!(is_delimiter(t), "{t:?}");
        }
        for t in ["(", "):", " = ", "\"\"\"", "]]"] {
            assert!(is_bracket_delimiter(t), "{t:?}");
        }
        // the single quote is in the code's set, not in the brackets-only re-slice
        assert!(is_delimiter("'") && !is_bracket_delimiter("'"));
        assert!(is_delimiter("')") && !is_bracket_delimiter("')"));
    }

    #[test]
    fn words_operators_and_mixed_tokens_are_not_structural() {
        for t in [
            "def", " return", "x", "(x", " +", ".", "->", "0", "<eos>", "\u{fffd}", ").",
        ] {
            assert!(!is_delimiter(t), "{t:?}");
            assert!(!is_bracket_delimiter(t), "{t:?}");
        }
        // the rule is per character: an equality operator is all '=' and counts
        assert!(is_delimiter(" ==") && is_bracket_delimiter("=="));
    }

    #[test]
    fn invalid_utf8_pieces_are_not_delimiters() {
        // the first byte of a 3-byte character alone decodes to U+FFFD
        assert_eq!(classify_bytes(&[0xe2]), Tags::default());
        assert_eq!(
            classify_bytes(b" ("),
            Tags {
                structural: true,
                bracket: true
            }
        );
        assert_eq!(
            classify_bytes(b"\n"),
            Tags {
                structural: true,
                bracket: false
            }
        );
    }

    #[test]
    fn python_strip_matches_str_strip() {
        assert_eq!(python_strip("\u{1f} a \u{85}"), "a");
        assert_eq!(python_strip("\u{200b}x"), "\u{200b}x"); // zero-width space is not whitespace
        assert_eq!(python_strip("\u{3000}x\u{2029}"), "x");
    }
}
