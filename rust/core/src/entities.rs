//! The entities a text names: ids, UUIDs, hex hashes, paths and file names,
//! URLs, emails, @handles, dates and times, numbers with units, versions,
//! code identifiers, capitalised names and quoted strings, each in a normal
//! form so that a memory and a query that name the same thing meet.
//!
//! The text is cut into pieces (whitespace, Chinese characters and CJK
//! punctuation end one; full-width ASCII reads as ASCII), each piece loses
//! the punctuation around it, and hand-written ASCII rules classify it, in
//! one linear pass. Python's `context_core.reference.entities` is the twin:
//! the same pieces, rules, order and normal forms.

use std::collections::HashSet;

use crate::summary::{FILE_EXTENSIONS, is_space, path_like, path_word};

/// Pieces longer than this (a minified blob, a base64 run) are passed over.
pub const MAX_PIECE_CHARS: usize = 128;

/// What kind of thing an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Url,
    Email,
    Handle,
    Uuid,
    Date,
    Time,
    Path,
    File,
    Version,
    Hex,
    Id,
    Number,
    Ident,
    Name,
    Quoted,
}

impl Kind {
    /// The kind's name, as Python sees it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Url => "url",
            Kind::Email => "email",
            Kind::Handle => "handle",
            Kind::Uuid => "uuid",
            Kind::Date => "date",
            Kind::Time => "time",
            Kind::Path => "path",
            Kind::File => "file",
            Kind::Version => "version",
            Kind::Hex => "hex",
            Kind::Id => "id",
            Kind::Number => "number",
            Kind::Ident => "ident",
            Kind::Name => "name",
            Kind::Quoted => "quoted",
        }
    }
}

const EDGES: &[char] = &[
    '"', '\'', '`', '(', ')', '<', '>', '[', ']', '{', '}', ',', ';', ':', '!', '?', '*',
];
const UNITS: [&str; 12] = [
    "%", "ms", "s", "sec", "min", "h", "kb", "mb", "gb", "tb", "k", "m",
];
/// Capitalised words that are not names (lower case).
const NOT_NAMES: &[&str] = &[
    "a", "an", "and", "also", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do",
    "does", "for", "from", "he", "her", "his", "how", "i", "if", "in", "is", "it", "its", "let",
    "may", "me", "my", "no", "not", "now", "of", "ok", "okay", "on", "or", "our", "please", "she",
    "should", "so", "thanks", "that", "the", "then", "there", "these", "they", "this", "those",
    "to", "use", "we", "what", "when", "where", "which", "who", "why", "will", "with", "would",
    "yes", "you", "your", "hi", "hello", "sure", "error", "warn", "warning", "info", "debug",
    "todo", "note", "fixme", "fatal",
];

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_hex_digit(c: char) -> bool {
    c.is_ascii_digit() || ('a'..='f').contains(&c)
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Chinese characters and CJK punctuation end a piece, as space does.
fn breaks(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF
        | 0xFF0C | 0xFF1A..=0xFF1B | 0xFF08..=0xFF09)
}

/// Full-width ASCII (U+FF01..U+FF5E) as ASCII.
fn ascii_width(c: char) -> char {
    match c as u32 {
        o @ 0xFF01..=0xFF5E => char::from_u32(o - 0xFEE0).unwrap_or(c),
        _ => c,
    }
}

fn lower(text: &str) -> String {
    text.to_ascii_lowercase()
}

/// `(piece, starts_sentence)`: runs that neither space nor a break ends. A
/// piece starts a sentence when it is the first, a newline (or CJK
/// punctuation) came before it, or the one before ended in `. ! ? :`.
fn pieces(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let (mut start_of_sentence, mut pending_start) = (true, true);
    for raw in text.chars() {
        if is_space(raw) || breaks(raw) {
            if !current.is_empty() {
                let last = current.chars().next_back();
                start_of_sentence = matches!(last, Some('.' | '!' | '?' | ':'));
                out.push((std::mem::take(&mut current), pending_start));
            }
            if raw == '\n' || raw == '\r' || (0x3000..=0x303F).contains(&(raw as u32)) {
                start_of_sentence = true;
            }
            continue;
        }
        if current.is_empty() {
            pending_start = start_of_sentence;
        }
        current.push(ascii_width(raw));
    }
    if !current.is_empty() {
        out.push((current, pending_start));
    }
    out
}

/// `word` without the quotes, brackets and punctuation around it, a
/// trailing `'s`, or a `:line[:column]` after a file reference.
fn bare(word: &str) -> &str {
    let mut word = word;
    loop {
        let mut next = word.trim_matches(EDGES).trim_end_matches('.');
        next = next
            .strip_suffix("'s")
            .or_else(|| next.strip_suffix("\u{2019}s"))
            .unwrap_or(next);
        for _ in 0..2 {
            if let Some(colon) = next.rfind(':') {
                let head = &next[..colon];
                if digits(&next[colon + 1..]) && (head.contains('/') || head.contains('.')) {
                    next = head;
                }
            }
        }
        if next.len() == word.len() {
            return word;
        }
        word = next;
    }
}

fn is_email(lw: &str) -> bool {
    let Some((local, domain)) = lw.split_once('@') else {
        return false;
    };
    if domain.contains('@') || local.is_empty() {
        return false;
    }
    let labels: Vec<&str> = domain.split('.').collect();
    local
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._%+-".contains(c))
        && labels.len() >= 2
        && labels.iter().all(|l| !l.is_empty())
        && domain
            .chars()
            .all(|c| c == '.' || c == '-' || c.is_ascii_alphanumeric())
        && labels
            .last()
            .is_some_and(|l| l.chars().count() >= 2 && l.chars().all(|c| c.is_ascii_lowercase()))
}

fn is_handle(lw: &str) -> bool {
    let Some(rest) = lw.strip_prefix('@') else {
        return false;
    };
    rest.chars().count() >= 2
        && rest.chars().next().is_some_and(is_word)
        && rest.chars().next_back().is_some_and(is_word)
        && rest.chars().all(|c| is_word(c) || c == '.' || c == '-')
}

fn is_uuid(lw: &str) -> bool {
    let parts: Vec<&str> = lw.split('-').collect();
    parts.iter().map(|p| p.chars().count()).eq([8, 4, 4, 4, 12])
        && parts.iter().all(|p| p.chars().all(is_hex_digit))
}

fn is_clock(w: &str, hours: usize) -> bool {
    let parts: Vec<&str> = w.split(':').collect();
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| digits(p)) {
        return false;
    }
    let first_ok = if hours > 0 {
        parts[0].len() == hours
    } else {
        (1..=2).contains(&parts[0].len())
    };
    first_ok && parts[1..].iter().all(|p| p.len() == 2)
}

fn is_date(w: &str) -> bool {
    let (day, time) = w.split_once('T').unwrap_or((w, ""));
    let d: Vec<&str> = day.split('-').collect();
    if !d.iter().map(|p| p.len()).eq([4, 2, 2]) || !d.iter().all(|p| digits(p)) {
        return false;
    }
    (time.is_empty() && !w.contains('T')) || is_clock(time, 2)
}

fn file_word(word: &str) -> bool {
    let Some(dot) = word.rfind('.') else {
        return false;
    };
    let (stem, extension) = (&word[..dot], &word[dot + 1..]);
    FILE_EXTENSIONS.contains(&lower(extension).as_str())
        && stem.chars().next_back().is_some_and(is_word)
        && stem.chars().all(|c| is_word(c) || c == '.' || c == '-')
}

/// The version `lw` names (without its `v`): `v` and two to four numbers,
/// or three or four, or two with a `-`/`+` suffix (`1.2` alone is a number).
fn version(lw: &str) -> Option<&str> {
    let prefixed = lw.starts_with('v');
    let body = if prefixed { &lw[1..] } else { lw };
    let (core, suffix) = match body.find(['-', '+']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if !(2..=4).contains(&parts.len()) || !parts.iter().all(|p| digits(p)) {
        return None;
    }
    if let Some(suffix) = suffix
        && (suffix.is_empty()
            || !suffix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.'))
    {
        return None;
    }
    (prefixed || parts.len() >= 3 || suffix.is_some()).then_some(body)
}

fn is_hex(lw: &str) -> bool {
    let n = lw.chars().count();
    (7..=64).contains(&n)
        && lw.chars().all(is_hex_digit)
        && lw.bytes().any(|b| b.is_ascii_digit())
        && lw.bytes().any(|b| b.is_ascii_lowercase())
}

/// `A-8812`, `order_123`, `PAY-42`, `call_22_5` (a digit in the last
/// segment), or letters then three or more digits (`INC0012345`).
fn is_id(w: &str) -> bool {
    if !w.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return false;
    }
    let segments: Vec<&str> = w.split(['-', '_']).collect();
    if segments.len() >= 2 {
        return segments
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
            && segments
                .last()
                .is_some_and(|s| s.bytes().any(|b| b.is_ascii_digit()));
    }
    let letters = w.chars().take_while(char::is_ascii_alphabetic).count();
    (1..=10).contains(&letters) && w.chars().count() - letters >= 3 && digits(&w[letters..])
}

/// `(number, unit)` of a number with an optional attached unit.
fn number(lw: &str) -> Option<(&str, &str)> {
    let bytes = lw.as_bytes();
    if !bytes.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut end = 0;
    while end < bytes.len()
        && (bytes[end].is_ascii_digit()
            || (matches!(bytes[end], b'.' | b',')
                && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)))
    {
        end += 1;
    }
    let unit = &lw[end..];
    (unit.is_empty() || UNITS.contains(&unit)).then_some((&lw[..end], unit))
}

fn is_snake(w: &str) -> bool {
    let parts: Vec<&str> = w.split('_').collect();
    parts.len() >= 2
        && w.starts_with(|c: char| c.is_ascii_lowercase())
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

fn is_camel(w: &str) -> bool {
    w.chars().count() >= 4
        && w.starts_with(|c: char| c.is_ascii_alphabetic())
        && w.chars().all(|c| c.is_ascii_alphanumeric())
        && w.as_bytes()
            .windows(2)
            .any(|p| p[0].is_ascii_lowercase() && p[1].is_ascii_uppercase())
}

fn is_capitalised(w: &str) -> bool {
    let mut chars = w.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && w.chars().count() >= 2
        && chars.all(|c| c.is_ascii_lowercase())
}

fn is_acronym(w: &str) -> bool {
    let letters = w.trim_end_matches(|c: char| c.is_ascii_digit());
    (2..=6).contains(&letters.chars().count()) && letters.chars().all(|c| c.is_ascii_uppercase())
}

/// The entities one bare piece names (`following` is the next bare piece,
/// for a unit written apart: `200 ms`).
fn classify(w: &str, following: Option<&str>, out: &mut Vec<(Kind, String)>) {
    let lw = lower(w);
    if (lw.starts_with("http://") || lw.starts_with("https://")) && lw.chars().count() > 8 {
        out.push((Kind::Url, lw.trim_end_matches('/').to_owned()));
        return;
    }
    if lw.contains('@') {
        if is_email(&lw) {
            out.push((Kind::Email, lw));
        } else if is_handle(&lw) {
            out.push((Kind::Handle, lw));
        }
        return;
    }
    if is_uuid(&lw) {
        out.push((Kind::Uuid, lw));
    } else if is_date(w) {
        out.push((Kind::Date, lw));
    } else if is_clock(w, 0) {
        out.push((Kind::Time, w.to_owned()));
    } else if w.contains('/') && !w.contains("://") && path_word(w) && path_like(w) {
        let path = lw.strip_prefix("./").unwrap_or(&lw).to_owned();
        out.push((Kind::Path, path));
        let name = w.rsplit('/').next().unwrap_or(w);
        if file_word(name) {
            out.push((Kind::File, lower(name)));
        }
    } else if file_word(w) {
        out.push((Kind::File, lw));
    } else if let Some(v) = version(&lw) {
        out.push((Kind::Version, v.to_owned()));
    } else if is_hex(&lw) {
        out.push((Kind::Hex, lw));
    } else if is_id(w) {
        out.push((Kind::Id, lw));
    } else if let Some((value, unit)) = number(&lw) {
        let apart = following
            .map(lower)
            .filter(|f| unit.is_empty() && UNITS.contains(&f.as_str()));
        let unit = apart.as_deref().unwrap_or(unit);
        if !unit.is_empty() {
            out.push((Kind::Number, format!("{value} {unit}")));
        } else if value.len() >= 3 {
            out.push((Kind::Number, value.to_owned()));
        }
    } else if is_snake(w) || is_camel(w) {
        out.push((Kind::Ident, lw));
    }
}

/// Runs of capitalised words and acronyms (`Alice Chen`, `AWS`), at most
/// four words each: a run goes on to the next piece when nothing was
/// stripped from this one and the next does not start a sentence. A lone
/// capitalised word that starts a sentence is not a name.
fn names(pieces: &[(String, bool)], bares: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    let mut run_starts = false;
    let close = |run: &mut Vec<&str>, run_starts: bool, out: &mut Vec<String>| {
        let lone_sentence_start = run.len() == 1 && run_starts && is_capitalised(run[0]);
        if !run.is_empty() && !lone_sentence_start {
            out.push(lower(&run.join(" ")));
        }
        run.clear();
    };
    for (index, ((piece, starts), w)) in pieces.iter().zip(bares).enumerate() {
        let name_like = !w.is_empty()
            && (is_capitalised(w) || is_acronym(w))
            && !NOT_NAMES.contains(&lower(w).as_str());
        if !name_like {
            close(&mut run, run_starts, &mut out);
            continue;
        }
        if run.is_empty() {
            run_starts = *starts;
        }
        run.push(w);
        let joins = pieces.get(index + 1).is_some_and(|next| !next.1) && piece == w;
        if !joins || run.len() == 4 {
            close(&mut run, run_starts, &mut out);
        }
    }
    close(&mut run, run_starts, &mut out);
    out
}

/// The insides of `"…"` (2-80 characters), `` `…` `` (1-80), `“…”` (2-80)
/// and `「…」` (1-80) on one line, leftmost first, as a regex finds them.
fn quoted(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, n) = (0, chars.len());
    while i < n {
        let (close, shortest) = match chars[i] {
            '"' => ('"', 2),
            '`' => ('`', 1),
            '\u{201c}' => ('\u{201d}', 2),
            '\u{300c}' => ('\u{300d}', 1),
            _ => {
                i += 1;
                continue;
            }
        };
        let mut j = i + 1;
        while j < n && j - i - 1 <= 80 && chars[j] != close && chars[j] != '\n' {
            j += 1;
        }
        let inside = j - i - 1;
        if j < n && chars[j] == close && (shortest..=80).contains(&inside) {
            out.push(chars[i + 1..j].iter().collect());
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// `(kind, value)` of every entity `text` names, each value once, in order
/// of first appearance: the pieces' own entities, then names, then quoted
/// strings. Values are normal forms: ASCII lowered, a path without its
/// leading `./`, a unit after one space.
pub fn entities(text: &str) -> Vec<(Kind, String)> {
    let pieces = pieces(text);
    let bares: Vec<&str> = pieces
        .iter()
        .map(|(p, _)| {
            if p.chars().count() <= MAX_PIECE_CHARS {
                bare(p)
            } else {
                ""
            }
        })
        .collect();
    let mut found = Vec::new();
    for (index, w) in bares.iter().enumerate() {
        // A plain lower-case word (most of any text) meets no rule: every
        // one needs a digit, a capital, or punctuation inside the word.
        if !w.is_empty() && !w.bytes().all(|b| b.is_ascii_lowercase()) {
            classify(w, bares.get(index + 1).copied(), &mut found);
        }
    }
    found.extend(names(&pieces, &bares).into_iter().map(|n| (Kind::Name, n)));
    for inside in quoted(text) {
        let value = lower(inside.trim_matches(is_space));
        if !value.is_empty() {
            found.push((Kind::Quoted, value));
        }
    }
    let mut seen = HashSet::new();
    found.retain(|(_, value)| !value.is_empty() && seen.insert(value.clone()));
    found
}

/// [`entities`] of each text, on several threads when the batch is large.
pub fn entities_many(texts: &[String]) -> Vec<Vec<(Kind, String)>> {
    let mut out = vec![Vec::new(); texts.len()];
    let bytes = texts.iter().map(String::len).sum();
    crate::parallel::map_into(texts, &mut out, bytes, |text| entities(text));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Vec<(&'static str, String)> {
        entities(text)
            .into_iter()
            .map(|(k, v)| (k.name(), v))
            .collect()
    }

    #[test]
    fn ids_paths_and_names_meet_in_normal_form() {
        let found = values("Refund A-8812 for Alice Chen in Services/Payments/retry.go:42.");
        assert_eq!(
            found,
            [
                ("id", "a-8812".to_owned()),
                ("path", "services/payments/retry.go".to_owned()),
                ("file", "retry.go".to_owned()),
                ("name", "alice chen".to_owned()),
            ]
        );
    }

    #[test]
    fn a_batch_finds_what_each_text_finds() {
        let texts: Vec<String> = (0..500)
            .map(|i| {
                format!(
                    "refund A-{i:04} for Alice Chen in src/pay_{i}.rs took {i} ms {}",
                    "x ".repeat(i)
                )
            })
            .collect();
        let batch = entities_many(&texts);
        assert!(
            texts.iter().map(String::len).sum::<usize>() >= crate::parallel::PARALLEL_MIN_BYTES
        );
        for (text, found) in texts.iter().zip(&batch) {
            assert_eq!(found, &entities(text));
        }
    }

    #[test]
    fn chinese_text_ends_a_piece() {
        assert_eq!(values("订单A-8812已退款"), [("id", "a-8812".to_owned())]);
    }

    #[test]
    fn units_apart_or_attached() {
        assert_eq!(
            values("took 200 ms then 5%"),
            [
                ("number", "200 ms".to_owned()),
                ("number", "5 %".to_owned())
            ]
        );
    }
}
