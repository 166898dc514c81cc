//! Character classes used by the OpenAI pre-tokenizer patterns.
//!
//! The patterns speak of `\p{L}`, `\p{Lu}`, `\p{N}`, `\s` and friends. tiktoken
//! evaluates them with the `regex` crate's Unicode tables; we read the very same
//! tables through `regex-syntax`, so a character belongs to a class here exactly
//! when tiktoken's regex says it does. The tables are turned once into a dense
//! lookup for the Basic Multilingual Plane plus a sorted range list for the rest.

use std::sync::LazyLock;

use regex_syntax::hir::{Class, HirKind};

/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: the "upper" run of the o200k word rules.
pub const UPPERISH: u8 = 1 << 0;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: the "lower" run of the o200k word rules.
pub const LOWERISH: u8 = 1 << 1;
/// `\p{L}`.
pub const LETTER: u8 = 1 << 2;
/// `\p{N}`.
pub const NUMBER: u8 = 1 << 3;
/// `\s` (Unicode `White_Space`).
pub const SPACE: u8 = 1 << 4;
/// `[\r\n]`.
pub const NEWLINE: u8 = 1 << 5;

/// The class bits of every character, built lazily from the regex tables.
pub struct ClassTable {
    ascii: [u8; 128],
    bmp: Box<[u8]>,
    astral: Vec<(u32, u32, u8)>,
}

static TABLE: LazyLock<ClassTable> = LazyLock::new(ClassTable::build);

/// Class bits of `c` (a combination of the constants above, 0 for "none").
#[cfg(test)]
pub fn of(c: char) -> u8 {
    TABLE.get(c)
}

impl ClassTable {
    /// The process-wide table.
    pub fn get_static() -> &'static ClassTable {
        &TABLE
    }

    /// Class bits of an ASCII byte (`byte < 0x80`).
    #[inline]
    pub fn ascii(&self, byte: u8) -> u8 {
        self.ascii[usize::from(byte & 0x7F)]
    }

    /// Class bits of any character.
    #[inline]
    pub fn class(&self, c: char) -> u8 {
        self.get(c)
    }

    #[inline]
    fn get(&self, c: char) -> u8 {
        let cp = c as u32;
        if let Some(&bits) = self.bmp.get(cp as usize) {
            return bits;
        }
        // The last run starting at or before `cp` is the only one that can hold it.
        let after = self.astral.partition_point(|&(lo, _, _)| lo <= cp);
        after
            .checked_sub(1)
            .map(|i| self.astral[i])
            .filter(|&(_, hi, _)| cp <= hi)
            .map_or(0, |(_, _, bits)| bits)
    }

    fn build() -> Self {
        let sets: [(&str, u8); 6] = [
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", UPPERISH),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", LOWERISH),
            (r"\p{L}", LETTER),
            (r"\p{N}", NUMBER),
            (r"\s", SPACE),
            (r"[\r\n]", NEWLINE),
        ];
        let mut bmp = vec![0u8; 0x1_0000].into_boxed_slice();
        // Astral code points: collect (start, end, bit) then merge into disjoint runs.
        let mut boundaries: Vec<u32> = Vec::new();
        let mut astral_ranges: Vec<(u32, u32, u8)> = Vec::new();
        for (pattern, bit) in sets {
            for (lo, hi) in unicode_ranges(pattern) {
                for cp in lo..=hi.min(0xFFFF) {
                    bmp[cp as usize] |= bit;
                }
                if hi > 0xFFFF {
                    let lo = lo.max(0x1_0000);
                    astral_ranges.push((lo, hi, bit));
                    boundaries.push(lo);
                    boundaries.push(hi + 1);
                }
            }
        }
        boundaries.sort_unstable();
        boundaries.dedup();
        let mut astral = Vec::new();
        for pair in boundaries.windows(2) {
            let (lo, hi) = (pair[0], pair[1] - 1);
            let bits = astral_ranges
                .iter()
                .filter(|&&(a, b, _)| a <= lo && hi <= b)
                .fold(0, |acc, &(_, _, bit)| acc | bit);
            if bits != 0 {
                match astral.last_mut() {
                    Some((_, end, last_bits)) if *end + 1 == lo && *last_bits == bits => *end = hi,
                    _ => astral.push((lo, hi, bits)),
                }
            }
        }
        let mut ascii = [0u8; 128];
        ascii.copy_from_slice(&bmp[..128]);
        Self { ascii, bmp, astral }
    }
}

/// The code point ranges a one-class regex matches, read from `regex-syntax`.
fn unicode_ranges(pattern: &str) -> Vec<(u32, u32)> {
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .expect("class patterns are valid");
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        other => unreachable!("{pattern} is not a Unicode class: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_classes() {
        assert_eq!(of('a'), LOWERISH | LETTER);
        assert_eq!(of('Z'), UPPERISH | LETTER);
        assert_eq!(of('7'), NUMBER);
        assert_eq!(of(' '), SPACE);
        assert_eq!(of('\n'), SPACE | NEWLINE);
        assert_eq!(of('\r'), SPACE | NEWLINE);
        assert_eq!(of('\''), 0);
    }

    #[test]
    fn non_ascii_classes() {
        assert_eq!(of('中'), UPPERISH | LOWERISH | LETTER); // Lo
        assert_eq!(of('\u{0301}'), UPPERISH | LOWERISH); // combining acute: M
        assert_eq!(of('\u{2028}'), SPACE); // line separator is \s but not [\r\n]
        assert_eq!(of('٣'), NUMBER); // Arabic-Indic digit three
        assert_eq!(of('😀'), 0);
        assert_eq!(of('𝐀'), UPPERISH | LETTER); // mathematical bold capital A (astral Lu)
        assert_eq!(of('𝐚'), LOWERISH | LETTER);
        assert_eq!(of('𠀀'), UPPERISH | LOWERISH | LETTER); // CJK extension B (astral Lo)
        assert_eq!(of('\u{10FFFF}'), 0);
    }

    #[test]
    fn table_agrees_with_regex_on_every_code_point() {
        let patterns: [(&str, u8); 6] = [
            (r"^[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]$", UPPERISH),
            (r"^[\p{Ll}\p{Lm}\p{Lo}\p{M}]$", LOWERISH),
            (r"^\p{L}$", LETTER),
            (r"^\p{N}$", NUMBER),
            (r"^\s$", SPACE),
            (r"^[\r\n]$", NEWLINE),
        ];
        for (pattern, bit) in patterns {
            let re = fancy_regex::Regex::new(pattern).unwrap();
            for c in (0..=0x10_FFFF).step_by(7).filter_map(char::from_u32) {
                let mut buf = [0; 4];
                let expected = re.is_match(c.encode_utf8(&mut buf)).unwrap();
                assert_eq!(
                    of(c) & bit != 0,
                    expected,
                    "{pattern} on U+{:04X}",
                    c as u32
                );
            }
        }
    }
}
