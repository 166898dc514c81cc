//! What counts as junk text: placeholders left by older clients and canned
//! error or cancel replies, as regular expressions matched against the whole
//! (trimmed) text of short messages.
//!
//! Patterns use the syntax Python's `re` and Rust's `regex` share (no
//! lookaround, no backreferences) and see the text with its ASCII letters in
//! lower case: case folding done here, identically on both sides, rather than
//! by each regex engine, whose Unicode folding rules differ (`İ`, `ſ`, `K`).

use regex::RegexSet;

use crate::error::{Error, Result};

/// Placeholders such as `[tool_call: quicksort]` that stood in for tool
/// traffic in older clients.
pub const DEFAULT_PLACEHOLDER_PATTERNS: &[&str] = &[
    r"\[(?:tool[ _-]?(?:call|use|result)|function[ _-]?(?:call|result))s?(?: *:[^\]\n]*)?\]",
    r"\[(?:image|file|attachment)(?: *:[^\]\n]*)? (?:omitted|removed)\]",
];

/// Friendly error and cancel replies, in English, Chinese, Japanese,
/// Spanish, French and German. Each matches the canned text only, not a real
/// message that happens to mention an error.
pub const DEFAULT_ERROR_PATTERNS: &[&str] = &[
    r"\[?(?:the )?request (?:was |has been )?(?:cancell?ed|aborted|interrupted)(?: by (?:the )?user)?(?: for tool use)?[.!…]*\]?",
    r"\[?(?:the )?(?:operation|generation|response|stream|task) (?:was |has been )?(?:cancell?ed|aborted|interrupted|stopped)(?: by (?:the )?user)?[.!…]*\]?",
    r"\[?(?:cancell?ed|aborted|interrupted|stopped) by (?:the )?user[.!…]*\]?",
    r"(?:an? )?(?:unexpected |unknown |internal )?error (?:has )?occurr?ed(?: while processing (?:your|the) request)?[.!…]*(?: please try again(?: later)?[.!…]*)?",
    r"something went wrong[.!…]*(?: please try again(?: later)?[.!…]*)?",
    r"(?:请求|操作|生成|任务)(?:已|已经|被)?(?:取消|中止|中断|终止)了?[。.!！…]*",
    r"(?:用户)?(?:已|已经)?(?:取消|中止|中断)了?(?:请求|操作|生成)[。.!！…]*",
    r"(?:发生|出现)了?(?:未知|内部)?错误[，,]?(?:请)?(?:稍后)?(?:重试|再试)?[。.!！…]*",
    r"出错了[，,]?(?:请)?(?:稍后)?(?:重试|再试)?[。.!！…]*",
    r"(?:リクエスト|処理|生成)(?:は|が)?(?:キャンセル|中断|中止)されました[。.!！…]*",
    r"エラーが発生しました[。.!！…]*(?:もう一度お試しください[。.!！…]*)?",
    r"la (?:solicitud|petición) (?:fue|ha sido) (?:cancelada|interrumpida)[.!…]*",
    r"la requête a été (?:annulée|interrompue)[.!…]*",
    r"die anfrage wurde (?:abgebrochen|unterbrochen)[.!…]*",
];

/// Texts longer than this (in characters, after trimming) are never matched:
/// canned replies are short, and skipping long texts keeps the pass cheap.
pub const DEFAULT_MAX_PATTERN_CHARS: usize = 256;

/// Which kind of junk a text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Junk {
    Placeholder,
    ErrorReply,
}

/// Compiled drop patterns.
pub struct Patterns {
    placeholders: RegexSet,
    errors: RegexSet,
    max_chars: usize,
}

impl Patterns {
    pub fn new(
        placeholders: &[impl AsRef<str>],
        errors: &[impl AsRef<str>],
        max_chars: usize,
    ) -> Result<Self> {
        Ok(Self {
            placeholders: compile(placeholders, "placeholder_patterns")?,
            errors: compile(errors, "error_patterns")?,
            max_chars,
        })
    }

    /// Whether the whole of `text` (trimmed of white space, ASCII letters
    /// lowered) is junk.
    pub fn classify(&self, text: &str) -> Option<Junk> {
        let text = trim(text);
        // A character is at most four bytes: only texts in between need counting.
        let too_long = text.len() > self.max_chars
            && (text.len() > 4 * self.max_chars || text.chars().count() > self.max_chars);
        if too_long {
            return None;
        }
        let text = text.to_ascii_lowercase();
        let text = text.as_str();
        if self.placeholders.is_match(text) {
            Some(Junk::Placeholder)
        } else if self.errors.is_match(text) {
            Some(Junk::ErrorReply)
        } else {
            None
        }
    }
}

fn compile(patterns: &[impl AsRef<str>], what: &str) -> Result<RegexSet> {
    // Anchored on both ends: a pattern must match the whole text.
    let anchored = patterns.iter().map(|p| format!("^(?:{})$", p.as_ref()));
    RegexSet::new(anchored).map_err(|error| Error::InvalidValue {
        path: what.to_owned(),
        reason: format!("invalid pattern: {error}"),
    })
}

/// `text` without leading and trailing Unicode `White_Space`.
pub fn trim(text: &str) -> &str {
    text.trim_matches(char::is_whitespace)
}

/// Whether `text` holds nothing but Unicode `White_Space`.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Patterns {
        Patterns::new(
            DEFAULT_PLACEHOLDER_PATTERNS,
            DEFAULT_ERROR_PATTERNS,
            DEFAULT_MAX_PATTERN_CHARS,
        )
        .unwrap()
    }

    #[test]
    fn canned_replies_are_junk() {
        let p = defaults();
        for text in [
            "The request was cancelled...",
            "  Request cancelled by user.  ",
            "[Request interrupted by user for tool use]",
            "An error occurred while processing your request. Please try again later.",
            "请求已取消。",
            "出错了，请稍后重试",
            "リクエストはキャンセルされました。",
            "La solicitud fue cancelada.",
            "Die Anfrage wurde abgebrochen",
        ] {
            assert_eq!(p.classify(text), Some(Junk::ErrorReply), "{text}");
        }
        assert_eq!(
            p.classify("[tool_call: quicksort]"),
            Some(Junk::Placeholder)
        );
        assert_eq!(p.classify("[Tool result]"), Some(Junk::Placeholder));
    }

    #[test]
    fn real_messages_are_not_junk() {
        let p = defaults();
        for text in [
            "The request was cancelled because the card expired; retry with another card.",
            "Something went wrong in the build: the linker cannot find -lssl.",
            "Why was my request cancelled?",
            "请求已取消的原因是什么？",
            "Use [tool_call: name] as the placeholder format in the docs",
        ] {
            assert_eq!(p.classify(text), None, "{text}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(Patterns::new(&["(unclosed"], DEFAULT_ERROR_PATTERNS, 10).is_err());
        assert!(Patterns::new(&[r"(?=lookahead)"], DEFAULT_ERROR_PATTERNS, 10).is_err());
    }
}
