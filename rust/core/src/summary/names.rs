//! The names a summary may only repeat: tool call ids, paths and file names,
//! found one whitespace-separated word at a time (as Python's `str.split()`
//! splits), and whether a value occurs in a text as a whole.

use memchr::memmem;

use super::is_space;

const EDGES: &[char] = &[
    '"', '\'', '`', '(', ')', '<', '>', '[', ']', '{', '}', ',', ';', ':', '!', '?', '*',
];
const PREFIXES: [&str; 5] = ["call_", "toolu_", "tool_", "fc_", "functions_"];

/// The names a tool call id starts with, in the twin's alternation order.
const TOOL_NAMES: [&str; 5] = ["call", "toolu", "tool", "fc", "functions"];

/// The twin's `(?:call|toolu|tool|fc|functions)_[A-Za-z0-9_-]*[A-Za-z0-9]`
/// matches in `word`, leftmost first, by hand: `(start, id)`.
fn tool_words(word: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = word.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let start = at;
            if !matches!(bytes[start], b'c' | b't' | b'f') {
                at += 1;
                continue;
            }
            let matched = TOOL_NAMES.iter().find_map(|name| {
                let after = start + name.len();
                if !bytes[start..].starts_with(name.as_bytes()) || bytes.get(after) != Some(&b'_') {
                    return None;
                }
                let run = bytes[after + 1..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-')
                    .count();
                let last = bytes[after + 1..after + 1 + run]
                    .iter()
                    .rposition(u8::is_ascii_alphanumeric)?;
                Some(after + 2 + last)
            });
            match matched {
                Some(end) => {
                    at = end;
                    return Some((start, &word[start..end]));
                }
                None => at += 1,
            }
        }
        None
    })
}
/// The file extensions a name is known by (the twin's alternation).
pub(crate) const FILE_EXTENSIONS: &[&str] = &[
    "py",
    "pyi",
    "go",
    "rs",
    "js",
    "mjs",
    "ts",
    "tsx",
    "jsx",
    "java",
    "kt",
    "rb",
    "php",
    "swift",
    "c",
    "h",
    "cc",
    "cpp",
    "hpp",
    "cs",
    "scala",
    "sql",
    "sh",
    "bash",
    "zsh",
    "md",
    "rst",
    "txt",
    "json",
    "jsonl",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "env",
    "lock",
    "csv",
    "tsv",
    "xml",
    "html",
    "css",
    "scss",
    "proto",
    "tf",
    "gradle",
    "log",
    "ipynb",
    "vue",
    "svelte",
    "dockerfile",
    "mk",
];

/// A character of a path's names: `[A-Za-z0-9_@%+=.,-]`.
pub(crate) fn is_path_char(c: char) -> bool {
    is_word_char(c) || "@%+=.,-".contains(c)
}

/// The twin's `(?:~|\.{1,2})?/?(?:[C]+/)+[C]*\w`, whole, by hand: an
/// optional `~` and `/`, then names of path characters joined by single
/// slashes (at least one), ending in a word character. (A leading `.` or
/// `..` is itself made of path characters.)
pub(crate) fn path_word(word: &str) -> bool {
    let rest = word.strip_prefix('~').unwrap_or(word);
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    rest.contains('/')
        && !rest.starts_with('/')
        && !rest.contains("//")
        && rest.chars().all(|c| c == '/' || is_path_char(c))
        && rest.chars().next_back().is_some_and(is_word_char)
}

/// The twin's `[A-Za-z0-9_.-]*\w\.(?:EXT)`, whole, by hand: an extension has
/// no dot, so it follows the last one.
fn file_word(word: &str) -> bool {
    let Some(dot) = word.rfind('.') else {
        return false;
    };
    let (stem, extension) = (&word[..dot], &word[dot + 1..]);
    FILE_EXTENSIONS.contains(&extension)
        && stem.chars().next_back().is_some_and(is_word_char)
        && stem
            .chars()
            .all(|c| is_word_char(c) || c == '.' || c == '-')
}

fn is_edge(c: char) -> bool {
    c.is_ascii() && EDGES.contains(&c)
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A path, not `I/O`, `async/await` or `3/4`: rooted, or deeper than one
/// slash, or ending in a name with an extension.
pub(crate) fn path_like(word: &str) -> bool {
    ["/", "./", "../", "~/"].iter().any(|p| word.starts_with(p))
        || word.matches('/').count() >= 2
        || word
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains('.'))
}

/// `word` without the quotes, brackets and punctuation around it, nor a
/// trailing `:line` or `:line:column` (as in `src/app.py:42`).
fn bare(word: &str) -> &str {
    let mut word = word;
    loop {
        let mut next = word.trim_matches(is_edge).trim_end_matches('.');
        for _ in 0..usize::from(next.as_bytes().contains(&b':')) * 2 {
            if let Some(colon) = next.rfind(':') {
                let digits = &next[colon + 1..];
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    next = &next[..colon];
                }
            }
        }
        if next.len() == word.len() {
            return word;
        }
        word = next;
    }
}

fn push_new<'a>(out: &mut Vec<&'a str>, item: &'a str) {
    if !out.contains(&item) {
        out.push(item);
    }
}

/// ASCII bytes Python's `str.split()` splits on.
const ASCII_SPACE: [bool; 128] = {
    let mut table = [false; 128];
    let mut byte = 0;
    while byte < 128 {
        table[byte] = matches!(byte as u8, b'\t'..=b'\r' | 0x1c..=0x1f | b' ');
        byte += 1;
    }
    table
};

/// The words of `text` as Python's `str.split()` gives them, holding a `/`
/// or a `.` (or, with `underscores`, a `_`), in order: found from those
/// bytes (a vectorised search) and widened to their word, not by reading
/// every word.
fn candidate_words(text: &str, underscores: bool) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut from = 0;
    std::iter::from_fn(move || {
        let rest = &bytes[from..];
        let hit = if underscores {
            memchr::memchr3(b'/', b'.', b'_', rest)
        } else {
            memchr::memchr2(b'/', b'.', rest)
        }? + from;
        let start = text[..hit]
            .char_indices()
            .rev()
            .find(|&(_, c)| ends_word(c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let end = text[hit..]
            .char_indices()
            .find(|&(_, c)| ends_word(c))
            .map_or(text.len(), |(i, _)| hit + i);
        from = end;
        Some(&text[start..end])
    })
}

/// A character that ends a word (see [`is_space`]).
fn ends_word(c: char) -> bool {
    if c.is_ascii() {
        ASCII_SPACE[c as usize]
    } else {
        is_space(c)
    }
}

/// `(tool call ids, paths and file names)` named in `text`, each once, in
/// order of first appearance.
pub fn named(text: &str) -> (Vec<&str>, Vec<&str>) {
    let (mut ids, mut files) = (Vec::new(), Vec::new());
    let look_for_ids = PREFIXES.iter().any(|p| text.contains(p));
    for raw in candidate_words(text, look_for_ids) {
        let bytes = raw.as_bytes();
        let (has_slash, has_dot) = (bytes.contains(&b'/'), bytes.contains(&b'.'));
        let word = bare(raw);
        // Every prefix ends in `_`: a word without one names no call.
        if look_for_ids
            && word.as_bytes().contains(&b'_')
            && PREFIXES.iter().any(|p| word.contains(p))
        {
            for (start, id) in tool_words(word) {
                let before = word[..start].chars().next_back();
                let has_digit = id.bytes().any(|b| b.is_ascii_digit());
                if has_digit && before.is_none_or(|c| !is_word_char(c)) {
                    push_new(&mut ids, id);
                }
            }
        }
        if (has_slash || has_dot)
            && !word.contains("://")
            && ((path_word(word) && path_like(word)) || file_word(word))
        {
            push_new(&mut files, word);
        }
    }
    (ids, files)
}

/// Whether `value` is in `text` as a whole: not inside a longer run of
/// ASCII letters, digits and underscores (`3` is not in `13`, nor in
/// `call_abc123`; `A-8812` is in `订单A-8812已退款`).
pub fn occurs(value: &str, text: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    // Every occurrence, overlapping ones too ("a-a" in "xa-a-a"), as the twin finds them.
    let finder = memmem::Finder::new(value.as_bytes());
    let mut from = 0;
    while let Some(found) = finder.find(&text.as_bytes()[from..]) {
        let start = from + found;
        let end = start + value.len();
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        if before.is_none_or(|c| !is_word_char(c)) && after.is_none_or(|c| !is_word_char(c)) {
            return true;
        }
        // The next char boundary: a value starts at one.
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}
