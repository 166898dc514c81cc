//! The forms of a text that tag keywords are matched against.
//!
//! The failure to avoid: a client rewrote Chinese punctuation and the
//! constraint "必须保证事务一致性" stopped matching. So text and keywords are both
//! brought to one form first: NFKC (full/half width, compatibility
//! characters), lower case, and punctuation and symbols (Unicode categories P
//! and S) treated as separators. The character tables come from
//! `regex-syntax`, as the pre-tokenizer's do.

use std::sync::LazyLock;

use regex_syntax::hir::{Class, HirKind};
use unicode_normalization::UnicodeNormalization;

/// The three forms of a normalised text, as UTF-8 bytes (the automata read
/// bytes, and the fast path need not check what it cuts is still UTF-8).
#[derive(Debug, PartialEq, Eq)]
pub struct Forms {
    /// NFKC, lower case; punctuation kept (for markers such as `<think>`, `http://`).
    pub lowered: Vec<u8>,
    /// `lowered` with punctuation, symbols and white space as single spaces
    /// (for English keywords, matched on word boundaries).
    pub spaced: Vec<u8>,
    /// `lowered` with punctuation, symbols and white space removed (for
    /// keywords in scripts without spaces, such as Chinese).
    pub squeezed: Vec<u8>,
}

/// All three forms of `text`.
pub fn forms(text: &str) -> Forms {
    forms_with(text, true)
}

/// The forms the tagger reads: as [`forms`], but the squeezed form of a text
/// that is ASCII once lowered is left empty. Keywords matched in the squeezed
/// form all hold a non-ASCII letter (ASCII ones go on word boundaries), so
/// such a text cannot match one, and English chat skips a pass.
pub fn forms_for_tagging(text: &str) -> Forms {
    forms_with(text, false)
}

/// The lowered form alone: `forms(text).lowered`.
pub fn lowered(text: &str) -> String {
    if is_ascii_or_cjk(text) {
        text.to_ascii_lowercase()
    } else if is_nfkc_quick_yes(text) {
        text.to_lowercase()
    } else {
        text.nfkc().collect::<String>().to_lowercase()
    }
}

fn forms_with(text: &str, squeeze_ascii: bool) -> Forms {
    if is_ascii_or_cjk(text) {
        return split_on_ascii(
            text.as_bytes().to_ascii_lowercase(),
            squeeze_ascii || !text.is_ascii(),
        );
    }
    // Most chat text is ASCII or already NFKC: skip the rewrite then. Lower
    // casing char by char is `str::to_lowercase` except for the final sigma,
    // so a text with a capital sigma takes the library's path.
    if !is_nfkc_quick_yes(text) {
        let lowered = text.nfkc().collect::<String>().to_lowercase();
        return split(&lowered, squeeze_ascii);
    }
    if text.contains('Σ') {
        return split(&text.to_lowercase(), squeeze_ascii);
    }
    // One pass lowers the text and builds the other two forms from it.
    let mut forms = Builder::new(text.len(), squeeze_ascii || !text.is_ascii());
    for c in text.chars() {
        if c.is_ascii() {
            forms.push_ascii(c.to_ascii_lowercase());
        } else if is_cjk_ideograph(c) {
            forms.push_letter(c);
        } else {
            for lower in c.to_lowercase() {
                forms.push(lower);
            }
        }
    }
    forms.finish()
}

/// The spaced and squeezed forms of an already lowered text.
fn split(lowered: &str, squeeze_ascii: bool) -> Forms {
    let mut forms = Builder::new(lowered.len(), squeeze_ascii || !lowered.is_ascii());
    for c in lowered.chars() {
        forms.push(c);
    }
    forms.finish()
}

/// The forms of a lowered text of ASCII and CJK ideographs, whose only
/// separators are ASCII bytes. Both forms are made a byte at a time without
/// branches (a branch at each word boundary mispredicts, and cost twice as
/// much): every byte is written, and the end of the output only moves past
/// the ones kept. Removing ASCII bytes leaves valid UTF-8.
fn split_on_ascii(lowered: Vec<u8>, squeeze: bool) -> Forms {
    let mut spaced = vec![0u8; lowered.len()];
    let mut squeezed = vec![0u8; if squeeze { lowered.len() } else { 0 }];
    let (mut spaced_end, mut squeezed_end) = (0, 0);
    // A separator run at the start gives nothing: as if one came before.
    let mut after_separator = true;
    for &b in &lowered {
        let separator = b.is_ascii() && !b.is_ascii_alphanumeric();
        spaced[spaced_end] = if separator { b' ' } else { b };
        spaced_end += usize::from(!(separator && after_separator));
        after_separator = separator;
        if squeeze {
            squeezed[squeezed_end] = b;
            squeezed_end += usize::from(!separator);
        }
    }
    // A run at the end leaves one space.
    spaced_end -= usize::from(after_separator && spaced_end > 0);
    spaced.truncate(spaced_end);
    squeezed.truncate(squeezed_end);
    Forms {
        lowered,
        spaced,
        squeezed,
    }
}

/// Builds the three forms from the lowered text, a char at a time.
struct Builder {
    lowered: String,
    spaced: String,
    squeezed: String,
    squeeze: bool,
    pending_space: bool,
}

impl Builder {
    fn new(capacity: usize, squeeze: bool) -> Self {
        Self {
            lowered: String::with_capacity(capacity),
            spaced: String::with_capacity(capacity),
            squeezed: String::with_capacity(if squeeze { capacity } else { 0 }),
            squeeze,
            pending_space: false,
        }
    }

    /// `lowered` gets every char; the others skip separators, and `spaced`
    /// turns each run of them into one space (none at either end).
    fn push(&mut self, c: char) {
        if is_separator(c) {
            self.lowered.push(c);
            self.pending_space = true;
        } else {
            self.push_letter(c);
        }
    }

    /// [`Builder::push`] for an ASCII char, without the Unicode tables.
    #[allow(clippy::inline_always)] // measured: 0.53 against 0.79 us a text with #[inline]
    #[inline(always)]
    fn push_ascii(&mut self, c: char) {
        if c.is_ascii_alphanumeric() {
            self.push_letter(c);
        } else {
            self.lowered.push(c);
            self.pending_space = true;
        }
    }

    /// [`Builder::push`] for a char known not to be a separator.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn push_letter(&mut self, c: char) {
        self.lowered.push(c);
        if self.pending_space && !self.spaced.is_empty() {
            self.spaced.push(' ');
        }
        self.pending_space = false;
        self.spaced.push(c);
        if self.squeeze {
            self.squeezed.push(c);
        }
    }

    fn finish(self) -> Forms {
        Forms {
            lowered: self.lowered.into_bytes(),
            spaced: self.spaced.into_bytes(),
            squeezed: self.squeezed.into_bytes(),
        }
    }
}

/// NFKC quick check, without the table lookups for CJK ideographs: they are
/// NFKC already and of combining class 0, so leaving them out can only turn
/// a "yes" into a "maybe" (which takes the full path), never the reverse.
fn is_nfkc_quick_yes(text: &str) -> bool {
    text.is_ascii()
        || unicode_normalization::is_nfkc_quick(text.chars().filter(|&c| !is_cjk_ideograph(c)))
            == unicode_normalization::IsNormalized::Yes
}

/// Whether `text` is ASCII and CJK ideographs only: NFKC already, and
/// lowered by lowering its ASCII letters.
fn is_ascii_or_cjk(text: &str) -> bool {
    // Lead bytes alone decide it: U+4E00..=U+9FFF is E4 B8 80..=E9 BF BF, and
    // a valid E4 lead has its two continuation bytes after it.
    let bytes = text.as_bytes();
    text.is_ascii()
        || bytes.iter().enumerate().all(|(i, &b)| {
            b < 0xC0 || (0xE5..=0xE9).contains(&b) || (b == 0xE4 && bytes[i + 1] >= 0xB8)
        })
}

/// The CJK Unified Ideographs block: letters, NFKC, caseless, combining class 0.
fn is_cjk_ideograph(c: char) -> bool {
    ('\u{4E00}'..='\u{9FFF}').contains(&c)
}

/// Punctuation, symbols and white space.
pub fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !c.is_ascii_alphanumeric();
    }
    // CJK ideographs, the bulk of non-ASCII chat text, are letters.
    if is_cjk_ideograph(c) {
        return false;
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
    use crate::testing::Lcg;

    #[test]
    fn width_case_and_punctuation_fold_away() {
        let a = forms("为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性");
        let b = forms(
            "为ＰａｙｍｅｎｔCallbackService addRetryLogic方法添加超时重试,必须保证事务一致性。",
        );
        assert_eq!(a.squeezed, b.squeezed);
        let squeezed = String::from_utf8(a.squeezed).unwrap();
        assert!(squeezed.contains("必须保证事务一致性"));
        assert_eq!(forms("Must-NOT   do,this!").spaced, b"must not do this");
        assert_eq!(forms("  <THINK> plan").lowered, b"  <think> plan");
    }

    /// The definition the fast paths must equal: NFKC, lower case, then split.
    fn spec(text: &str) -> Forms {
        let lowered = text.nfkc().collect::<String>().to_lowercase();
        let words: Vec<String> = lowered
            .split(is_separator)
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect();
        Forms {
            spaced: words.join(" ").into_bytes(),
            squeezed: words.concat().into_bytes(),
            lowered: lowered.into_bytes(),
        }
    }

    #[test]
    fn the_ascii_and_cjk_path_equals_the_definition() {
        // Long texts of ASCII and CJK ideographs, with the chars just outside
        // the block (U+4DFF is a symbol, a separator; U+A000 a Yi syllable).
        let pool: Vec<char> = "aZ9 ,.-_\t\n'!必须保证一\u{9FFF}\u{4DFF}\u{A000}"
            .chars()
            .collect();
        let mut random = Lcg::new(0x2545_F491_4F6C_DD1D);
        for _ in 0..5_000 {
            let text = random.text(&pool, 80);
            assert_eq!(forms(&text), spec(&text), "{text:?}");
            assert_eq!(lowered(&text).into_bytes(), spec(&text).lowered, "{text:?}");
        }
    }

    #[test]
    fn fast_paths_equal_the_definition() {
        // Final sigma, Kelvin sign, dotted capital I, combining marks out of
        // order, full width, CJK, Hangul, emoji, punctuation of both scripts.
        let pool: Vec<char> = "aZ9 ,.-ΣσΑΒKİÅé\u{301}\u{316}\u{300}ﬁＡｂ必须保证，。한글😀\t\n_"
            .chars()
            .collect();
        let mut random = Lcg::new(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let text = random.text(&pool, 12);
            assert_eq!(forms(&text), spec(&text), "{text:?}");
            assert_eq!(lowered(&text).into_bytes(), spec(&text).lowered, "{text:?}");
            let tagging = forms_for_tagging(&text);
            let expected = spec(&text);
            assert_eq!(tagging.lowered, expected.lowered, "{text:?}");
            assert_eq!(tagging.spaced, expected.spaced, "{text:?}");
            if !expected.lowered.is_ascii() {
                assert_eq!(tagging.squeezed, expected.squeezed, "{text:?}");
            }
        }
    }
}
