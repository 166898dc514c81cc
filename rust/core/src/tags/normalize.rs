//! The forms of a text that tag keywords are matched against.
//!
//! Seed 003's failure: a client rewrote Chinese punctuation and the
//! constraint "必须保证事务一致性" stopped matching. So text and keywords are both
//! brought to one form first: NFKC (full/half width, compatibility
//! characters), lower case, and punctuation and symbols (Unicode categories P
//! and S) treated as separators. The character tables come from
//! `regex-syntax`, as the pre-tokenizer's do.

use std::sync::LazyLock;

use regex_syntax::hir::{Class, HirKind};
use unicode_normalization::UnicodeNormalization;

/// The three forms of a normalised text.
#[derive(Debug, PartialEq, Eq)]
pub struct Forms {
    /// NFKC, lower case; punctuation kept (for markers such as `<think>`, `http://`).
    pub lowered: String,
    /// `lowered` with punctuation, symbols and white space as single spaces
    /// (for English keywords, matched on word boundaries).
    pub spaced: String,
    /// `lowered` with punctuation, symbols and white space removed (for
    /// keywords in scripts without spaces, such as Chinese).
    pub squeezed: String,
}

/// All three forms of `text`.
pub fn forms(text: &str) -> Forms {
    // `str::to_lowercase`, not per character: it knows the final sigma.
    // Most chat text is ASCII or already NFKC: skip the rewrite then.
    let lowered = if text.is_ascii() {
        text.to_ascii_lowercase()
    } else if unicode_normalization::is_nfkc_quick(text.chars())
        == unicode_normalization::IsNormalized::Yes
    {
        text.to_lowercase()
    } else {
        text.nfkc().collect::<String>().to_lowercase()
    };
    let mut spaced = String::with_capacity(lowered.len());
    let mut squeezed = String::with_capacity(lowered.len());
    let mut pending_space = false;
    for c in lowered.chars() {
        if is_separator(c) {
            pending_space = true;
        } else {
            if pending_space && !spaced.is_empty() {
                spaced.push(' ');
            }
            pending_space = false;
            spaced.push(c);
            squeezed.push(c);
        }
    }
    Forms {
        lowered,
        spaced,
        squeezed,
    }
}

/// Punctuation, symbols and white space.
pub fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_alphanumeric();
    }
    c.is_whitespace() || SEPARATORS.contains(c)
}

struct Ranges(Vec<(char, char)>);

impl Ranges {
    fn contains(&self, c: char) -> bool {
        let after = self.0.partition_point(|&(lo, _)| lo <= c);
        after > 0 && c <= self.0[after - 1].1
    }
}

static SEPARATORS: LazyLock<Ranges> = LazyLock::new(|| {
    let hir = regex_syntax::Parser::new()
        .parse(r"[\p{P}\p{S}]")
        .expect("a valid class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => Ranges(
            class
                .ranges()
                .iter()
                .map(|r| (r.start(), r.end()))
                .collect(),
        ),
        other => unreachable!("not a class: {other:?}"),
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_case_and_punctuation_fold_away() {
        let a = forms("为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性");
        let b = forms(
            "为ＰａｙｍｅｎｔCallbackService addRetryLogic方法添加超时重试,必须保证事务一致性。",
        );
        assert_eq!(a.squeezed, b.squeezed);
        assert!(a.squeezed.contains("必须保证事务一致性"));
        assert_eq!(forms("Must-NOT   do,this!").spaced, "must not do this");
        assert_eq!(forms("  <THINK> plan").lowered, "  <think> plan");
    }
}
