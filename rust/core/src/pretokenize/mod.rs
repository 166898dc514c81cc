//! Pre-tokenization: splitting text into the pieces that BPE encodes one by one.
//!
//! tiktoken splits text with a backtracking regex (fancy-regex). These are
//! hand-written matchers for the three OpenAI patterns that reproduce the
//! regex's leftmost-first, greedy/possessive semantics exactly, alternative by
//! alternative, in one left-to-right pass with no backtracking engine. That is
//! several times faster than the regex, has no stack or backtrack limit (tiktoken
//! itself overflows its stack on a megabyte of spaces), and is checked against
//! the real patterns by differential tests (`tests` below and the Python suite).

mod classes;

use classes::ClassTable;
use classes::{LETTER, LOWERISH, NEWLINE, NUMBER, SPACE, UPPERISH};

/// The end of `text` whose pre-tokens may change when `"\n"` and more text
/// are appended to it, for every OpenAI pattern: everything after the last
/// letter or digit; `None` when that cannot be said simply (no letter or
/// digit, or a combining mark in that end, which o200k joins to the letter).
///
/// No pattern's letter or digit run takes anything after it but letters,
/// digits, marks or a contraction (`'s`...), none of which the end holds,
/// and no pattern looks behind. So every pre-token before the end is the
/// same with or without what is appended, and
/// `count(a + "\n" + b) == count(a) - count(tail) + count(tail + "\n" + b)`.
pub fn join_tail(text: &str) -> Option<&str> {
    let table = ClassTable::get_static();
    let mut start = text.len();
    for (at, c) in text.char_indices().rev() {
        let class = table.class(c);
        if class & (LETTER | NUMBER) != 0 {
            return Some(&text[start..]);
        }
        if class & (UPPERISH | LOWERISH) != 0 {
            return None; // a mark
        }
        start = at;
    }
    None
}

/// Whether a text that goes on with `c` after a letter or digit keeps its
/// pre-tokens up to that letter or digit: `c` cannot continue the run (a
/// letter, digit, mark or contraction's apostrophe would), so by the
/// argument of [`join_tail`] the run ends there whatever follows.
pub fn ends_run(c: char) -> bool {
    let class = ClassTable::get_static().class(c);
    class & (LETTER | NUMBER | UPPERISH | LOWERISH) == 0 && c != '\''
}

/// The largest `h <= end` (a char boundary of `text`) at which `text[..h]`
/// ends with a letter or digit and what follows it both in `text` and in
/// `text[..end] + more` (where `more` starts with `next`, if anything)
/// [`ends_run`]. The pre-tokens of `text[..h]` are then pre-tokens of both
/// texts, so the tokens before `h` can be reused and only what comes after
/// needs BPE. Looks back at most `within` bytes; `None` if no such point is
/// there.
pub fn stable_cut(text: &str, end: usize, next: Option<char>, within: usize) -> Option<usize> {
    let table = ClassTable::get_static();
    let mut after_in_text = text[end..].chars().next();
    let mut after_in_cut = next;
    for (at, c) in text[..end].char_indices().rev() {
        if end - at > within {
            return None;
        }
        if table.class(c) & (LETTER | NUMBER) != 0
            && after_in_text.is_none_or(ends_run)
            && after_in_cut.is_none_or(ends_run)
        {
            return Some(at + c.len_utf8());
        }
        after_in_text = Some(c);
        after_in_cut = Some(c);
    }
    None
}

/// Which OpenAI split pattern to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// `o200k_base` (gpt-4o, gpt-4.1, o-series, gpt-5).
    O200k,
    /// `cl100k_base` (gpt-4, gpt-3.5-turbo, text-embedding-3).
    Cl100k,
    /// `r50k_base` and `p50k_base` (GPT-3 and Codex).
    R50k,
}

impl Pattern {
    /// The regex tiktoken uses for this pattern (used by tests and the reference).
    pub fn regex(self) -> &'static str {
        match self {
            Pattern::O200k => concat!(
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                r"|\p{N}{1,3}",
                r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
                r"|\s*[\r\n]+",
                r"|\s+(?!\S)",
                r"|\s+",
            ),
            Pattern::Cl100k => {
                r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
            }
            Pattern::R50k => {
                r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"
            }
        }
    }

    /// The pieces of `text`, in order; they concatenate back to `text`.
    pub fn split(self, text: &str) -> Pieces<'_> {
        Pieces {
            cursor: Cursor::new(text),
            pos: 0,
            pattern: self,
        }
    }

    /// Byte offset where the piece starting at `start` ends.
    fn piece_end(self, cursor: &Cursor<'_>, start: usize) -> usize {
        match self {
            Pattern::O200k => o200k_piece_end(cursor, start),
            Pattern::Cl100k => cl100k_piece_end(cursor, start),
            Pattern::R50k => r50k_piece_end(cursor, start),
        }
    }
}

/// Iterator over the pieces of a text.
pub struct Pieces<'a> {
    cursor: Cursor<'a>,
    pos: usize,
    pattern: Pattern,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let text = self.cursor.text;
        if self.pos >= text.len() {
            return None;
        }
        let start = self.pos;
        let end = self.pattern.piece_end(&self.cursor, start);
        // Every character belongs to some alternative, so `end > start`; should
        // that ever fail, step one character rather than loop forever.
        self.pos = if end > start {
            end
        } else {
            start + text[start..].chars().next().map_or(1, char::len_utf8)
        };
        Some(&text[start..self.pos])
    }
}

/// Reads characters and their classes at byte offsets.
struct Cursor<'a> {
    text: &'a str,
    table: &'static ClassTable,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            table: ClassTable::get_static(),
        }
    }

    /// The character at `pos` (a char boundary), its class bits and byte length.
    /// Always inlined: left to itself the compiler made it a call per
    /// character, and counting a chat message took 20% longer (measured).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn at(&self, pos: usize) -> Option<(char, u8, usize)> {
        let &byte = self.text.as_bytes().get(pos)?;
        if byte < 0x80 {
            return Some((byte as char, self.table.ascii(byte), 1));
        }
        let c = self.text[pos..].chars().next()?;
        Some((c, self.table.class(c), c.len_utf8()))
    }

    #[inline]
    fn class_at(&self, pos: usize) -> Option<(u8, usize)> {
        self.at(pos).map(|(_, class, len)| (class, len))
    }

    /// End of the run of characters from `pos` whose class intersects `mask`.
    #[inline]
    fn run(&self, mut pos: usize, mask: u8) -> usize {
        while let Some((class, len)) = self.class_at(pos) {
            if class & mask == 0 {
                break;
            }
            pos += len;
        }
        pos
    }

    /// End of the run from `pos` of characters with none of the bits in `mask`.
    #[inline]
    fn run_without(&self, mut pos: usize, mask: u8) -> usize {
        while let Some((class, len)) = self.class_at(pos) {
            if class & mask != 0 {
                break;
            }
            pos += len;
        }
        pos
    }

    /// End of the run from `pos` of characters from the ASCII set `set`.
    #[inline]
    fn run_of(&self, mut pos: usize, set: &[u8]) -> usize {
        while self
            .text
            .as_bytes()
            .get(pos)
            .is_some_and(|b| set.contains(b))
        {
            pos += 1;
        }
        pos
    }

    /// Up to `max` characters of class `mask` from `pos`.
    #[inline]
    fn run_at_most(&self, mut pos: usize, mask: u8, max: usize) -> usize {
        for _ in 0..max {
            match self.class_at(pos) {
                Some((class, len)) if class & mask != 0 => pos += len,
                _ => break,
            }
        }
        pos
    }

    /// Whitespace run from `pos`: its end, the end of its last `\r`/`\n`, and
    /// the start of its last character.
    #[inline]
    fn space_run(&self, mut pos: usize) -> SpaceRun {
        let mut run = SpaceRun {
            end: pos,
            after_last_newline: None,
            last_char_start: pos,
        };
        while let Some((class, len)) = self.class_at(pos) {
            if class & SPACE == 0 {
                break;
            }
            run.last_char_start = pos;
            pos += len;
            if class & NEWLINE != 0 {
                run.after_last_newline = Some(pos);
            }
        }
        run.end = pos;
        run
    }

    /// Length of a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at
    /// `pos`, in the order the patterns list them. `fold` applies the `(?i)` of
    /// the o200k and cl100k patterns (Unicode simple case folding).
    #[inline]
    fn contraction(&self, pos: usize, fold: bool) -> Option<usize> {
        let rest = self.text.get(pos..)?.strip_prefix('\'')?;
        let mut chars = rest.chars();
        let first = chars.next()?;
        let is = |c: char, letter: char| {
            if fold {
                folds_to(c, letter)
            } else {
                c == letter
            }
        };
        if ['s', 't', 'm', 'd'].iter().any(|&l| is(first, l)) {
            return Some(1 + first.len_utf8());
        }
        let second = chars.next()?;
        for (a, b) in [('r', 'e'), ('v', 'e'), ('l', 'l')] {
            if is(first, a) && is(second, b) {
                return Some(1 + first.len_utf8() + second.len_utf8());
            }
        }
        None
    }
}

struct SpaceRun {
    end: usize,
    after_last_newline: Option<usize>,
    last_char_start: usize,
}

/// Whether `c` matches the lowercase ASCII `letter` under `(?i)`. Unicode simple
/// case folding adds one non-ASCII member among the letters used: `ſ` ~ `s`.
#[inline]
fn folds_to(c: char, letter: char) -> bool {
    c.to_ascii_lowercase() == letter || (letter == 's' && c == '\u{017F}')
}

/// A character that may lead a word: `[^\r\n\p{L}\p{N}]`.
const NOT_PREFIX: u8 = NEWLINE | LETTER | NUMBER;
/// `[^\s\p{L}\p{N}]`: punctuation, symbols, marks.
const NOT_PUNCT: u8 = SPACE | LETTER | NUMBER;

fn o200k_piece_end(cur: &Cursor<'_>, start: usize) -> usize {
    let Some((c, class, len)) = cur.at(start) else {
        return start;
    };
    let prefixable = class & NOT_PREFIX == 0;
    // 1. [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+('s|...)?
    if prefixable && let Some(end) = o200k_lower_word(cur, start + len) {
        return end;
    }
    if let Some(end) = o200k_lower_word(cur, start) {
        return end;
    }
    // 2. [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]+[Ll Lm Lo M]*('s|...)?
    if prefixable && let Some(end) = o200k_upper_word(cur, start + len) {
        return end;
    }
    if let Some(end) = o200k_upper_word(cur, start) {
        return end;
    }
    // 3. \p{N}{1,3}
    if class & NUMBER != 0 {
        return cur.run_at_most(start, NUMBER, 3);
    }
    // 4.  ?[^\s\p{L}\p{N}]+[\r\n/]*
    if let Some(end) = punctuation(cur, start, c, class) {
        return cur.run_of(end, b"\r\n/");
    }
    // 5-7. \s*[\r\n]+ | \s+(?!\S) | \s+
    let run = cur.space_run(start);
    if let Some(end) = run.after_last_newline {
        return end;
    }
    if run.end == cur.text.len() || run.last_char_start == start {
        return run.end;
    }
    run.last_char_start
}

/// `[Lu Lt Lm Lo M]*[Ll Lm Lo M]+` then an optional contraction, at `pos`.
#[inline]
fn o200k_lower_word(cur: &Cursor<'_>, mut pos: usize) -> Option<usize> {
    // Greedy upper run; remember where its last lower-capable character ends,
    // which is where backtracking would let the lower run match.
    let mut backtrack_end = None;
    loop {
        match cur.class_at(pos) {
            Some((class, len)) if class & UPPERISH != 0 => {
                pos += len;
                if class & LOWERISH != 0 {
                    backtrack_end = Some(pos);
                }
            }
            Some((class, _)) if class & LOWERISH != 0 => {
                let end = cur.run(pos, LOWERISH);
                return Some(end + cur.contraction(end, true).unwrap_or(0));
            }
            _ => break,
        }
    }
    backtrack_end.map(|end| end + cur.contraction(end, true).unwrap_or(0))
}

/// `[Lu Lt Lm Lo M]+[Ll Lm Lo M]*` then an optional contraction, at `pos`.
#[inline]
fn o200k_upper_word(cur: &Cursor<'_>, pos: usize) -> Option<usize> {
    let upper_end = cur.run(pos, UPPERISH);
    if upper_end == pos {
        return None;
    }
    let end = cur.run(upper_end, LOWERISH);
    Some(end + cur.contraction(end, true).unwrap_or(0))
}

/// ` ?[^\s\p{L}\p{N}]+` at `start` (whose character is `c` of class `class`).
#[inline]
fn punctuation(cur: &Cursor<'_>, start: usize, c: char, class: u8) -> Option<usize> {
    if c == ' ' {
        let after_space = start + 1;
        let end = cur.run_without(after_space, NOT_PUNCT);
        (end > after_space).then_some(end)
    } else if class & NOT_PUNCT == 0 {
        Some(cur.run_without(start, NOT_PUNCT))
    } else {
        None
    }
}

fn cl100k_piece_end(cur: &Cursor<'_>, start: usize) -> usize {
    let Some((c, class, len)) = cur.at(start) else {
        return start;
    };
    // 1. '(?i:[sdmt]|ll|ve|re)
    if let Some(n) = cur.contraction(start, true) {
        return start + n;
    }
    // 2. [^\r\n\p{L}\p{N}]?+\p{L}++ (the possessive prefix never gives its character back)
    if class & NOT_PREFIX == 0 {
        if let Some((next, _)) = cur.class_at(start + len)
            && next & LETTER != 0
        {
            return cur.run(start + len, LETTER);
        }
    } else if class & LETTER != 0 {
        return cur.run(start, LETTER);
    }
    // 3. \p{N}{1,3}+
    if class & NUMBER != 0 {
        return cur.run_at_most(start, NUMBER, 3);
    }
    // 4.  ?[^\s\p{L}\p{N}]++[\r\n]*+
    if let Some(end) = punctuation(cur, start, c, class) {
        return cur.run_of(end, b"\r\n");
    }
    // 5-8. \s++$ | \s*[\r\n] | \s+(?!\S) | \s
    let run = cur.space_run(start);
    if run.end == cur.text.len() {
        return run.end;
    }
    if let Some(end) = run.after_last_newline {
        return end;
    }
    if run.last_char_start > start {
        return run.last_char_start;
    }
    start + len
}

fn r50k_piece_end(cur: &Cursor<'_>, start: usize) -> usize {
    let Some((c, class, len)) = cur.at(start) else {
        return start;
    };
    // 1. '(?:[sdmt]|ll|ve|re)
    if let Some(n) = cur.contraction(start, false) {
        return start + n;
    }
    // 2-4.  ?\p{L}++ |  ?\p{N}++ |  ?[^\s\p{L}\p{N}]++
    let (body_start, body_class) = if c == ' ' {
        match cur.class_at(start + 1) {
            Some((next, _)) => (start + 1, next),
            None => (start, class),
        }
    } else {
        (start, class)
    };
    if body_class & LETTER != 0 {
        return cur.run(body_start, LETTER);
    }
    if body_class & NUMBER != 0 {
        return cur.run(body_start, NUMBER);
    }
    if body_class & NOT_PUNCT == 0 {
        return cur.run_without(body_start, NOT_PUNCT);
    }
    // 5-7. \s++$ | \s+(?!\S) | \s
    let run = cur.space_run(start);
    if run.end == cur.text.len() {
        return run.end;
    }
    if run.last_char_start > start {
        return run.last_char_start;
    }
    start + len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pattern: Pattern, text: &str) -> Vec<&str> {
        pattern.split(text).collect()
    }

    fn regex_pieces(re: &fancy_regex::Regex, text: &str) -> Vec<String> {
        re.find_iter(text)
            .map(|m| m.unwrap().as_str().to_owned())
            .collect()
    }

    #[test]
    fn known_splits() {
        assert_eq!(
            pieces(Pattern::O200k, "Hello, world! I'M here  \n\n  ok"),
            [
                "Hello", ",", " world", "!", " I'M", " here", "  \n\n", " ", " ok"
            ]
        );
        assert_eq!(
            pieces(Pattern::Cl100k, "don't 12345 HTTPServer"),
            ["don", "'t", " ", "123", "45", " HTTPServer"]
        );
        assert_eq!(
            pieces(Pattern::R50k, "It's 2024!!  ok"),
            ["It", "'s", " 2024", "!!", " ", " ok"]
        );
        assert_eq!(
            pieces(Pattern::O200k, "HTTPServer camelCase"),
            ["HTTPServer", " camel", "Case"]
        );
    }

    use crate::testing::Lcg;

    /// Characters chosen to hit every branch: each letter category, marks,
    /// digits of several scripts, every kind of space, newlines, apostrophes,
    /// the case-folding `ſ`, slashes and symbols.
    const ALPHABET: &[char] = &[
        'a',
        'b',
        's',
        't',
        'd',
        'm',
        'l',
        'v',
        'e',
        'r',
        'A',
        'S',
        'T',
        'D',
        'M',
        'L',
        'V',
        'E',
        'R',
        'ſ',
        'K',
        'ǅ',
        'ʰ',
        '中',
        '文',
        'ß',
        'É',
        'é',
        '\u{0301}',
        '\u{0903}',
        '\u{20DD}',
        '0',
        '7',
        '٣',
        'Ⅻ',
        '½',
        ' ',
        ' ',
        ' ',
        '\t',
        '\n',
        '\r',
        '\u{0B}',
        '\u{0C}',
        '\u{85}',
        '\u{A0}',
        '\u{2028}',
        '\u{3000}',
        '\'',
        '\'',
        '’',
        '/',
        '.',
        ',',
        '!',
        '-',
        '_',
        '"',
        '😀',
        '\u{200D}',
        '𝐀',
        '𝐚',
        '𝟙',
        '\u{E0100}',
    ];

    #[test]
    fn agrees_with_tiktoken_regex_on_random_text() {
        let mut rng = Lcg::new(0x5EED);
        for pattern in [Pattern::O200k, Pattern::Cl100k, Pattern::R50k] {
            let re = fancy_regex::Regex::new(pattern.regex()).unwrap();
            for _ in 0..20_000 {
                let len = (rng.next() % 16) as usize;
                let text: String = (0..len)
                    .map(|_| ALPHABET[(rng.next() as usize) % ALPHABET.len()])
                    .collect();
                assert_eq!(
                    pieces(pattern, &text),
                    regex_pieces(&re, &text),
                    "{pattern:?} on {text:?}"
                );
            }
        }
    }

    #[test]
    fn agrees_with_tiktoken_regex_on_prose_and_code() {
        let text = concat!(
            "fn main() {\n    let x = 42; // it's the answer\r\n\tprintln!(\"{x}\");\n}\n\n",
            "The QUICK brown fox's   jumps  —  über 12,345.67 dogs ‘quoted’ \u{3000}全角 テキスト\n",
            "日本語のテキストとEnglish混在。한국어 문장도 있습니다. Ünïcödé ÇÀ ʰmodifier\n  \n",
            "path/to/file.rs:10:5 https://example.com/a?b=c&d=e  ",
        );
        for pattern in [Pattern::O200k, Pattern::Cl100k, Pattern::R50k] {
            let re = fancy_regex::Regex::new(pattern.regex()).unwrap();
            assert_eq!(pieces(pattern, text), regex_pieces(&re, text));
        }
    }

    #[test]
    fn long_runs_are_linear_and_do_not_overflow() {
        let spaces = " ".repeat(1 << 20);
        assert_eq!(pieces(Pattern::O200k, &spaces), [spaces.as_str()]);
        let letters = "a".repeat(1 << 20);
        assert_eq!(pieces(Pattern::Cl100k, &letters).len(), 1);
    }
}
