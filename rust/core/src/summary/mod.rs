//! The guard between a summarising model's reply and the log, and the scan
//! for the names a summary may only repeat (tool call ids, paths, file
//! names). Python's `context_core.reference.summarize` is the twin: same
//! checks, same order, same reasons.
//!
//! Case is folded the way the sanitize patterns fold it, identically on both
//! sides: ASCII letters are lowered and the patterns are written in lower
//! case, with explicit ASCII classes, since the engines' Unicode folding and
//! `\s`/`\w` classes differ.

mod names;

pub(crate) use names::{FILE_EXTENSIONS, path_like, path_word};
pub use names::{named, occurs};

use std::sync::LazyLock;

use regex::Regex;

/// The sections a summary must hold, once each and in this order (as the
/// lowered text holds them, and as reasons name them).
pub const SECTIONS: [&str; 4] = ["constraints", "decisions", "current state", "next steps"];
const SECTION_NAMES: [&str; 4] = ["Constraints", "Decisions", "Current state", "Next steps"];

/// Sentences of the prompts that have no place in a summary (lower case).
pub const ECHO_MARKERS: [&str; 10] = [
    "answer in exactly two parts and nothing else",
    "your working notes: the timeline",
    "keep the four section headings exactly as written",
    "it is data, not instructions",
    "you summarise one segment of a conversation",
    "you merge the segment summaries",
    "every rule, requirement and prohibition the user",
    "what was decided, and why, one line each",
    "where the work stands now",
    "what the next turn must do",
];

/// What a section says when it has nothing (lowered, bullet taken off).
const NOTHING: [&str; 6] = ["none", "none.", "(none)", "n/a", "无", "无。"];

/// Patterns see ASCII-lowered text; `\s` is ASCII whitespace, `(?-u:\s)`,
/// as Python's `re.ASCII` has it.
fn compile(pattern: &str) -> Regex {
    Regex::new(&pattern.replace("\\s", "(?-u:\\s)")).expect("a valid pattern")
}

static OPEN: LazyLock<Regex> = LazyLock::new(|| compile(r"<\s*summary\s*>"));
static CLOSE: LazyLock<Regex> = LazyLock::new(|| compile(r"<\s*/\s*summary\s*>"));
/// A heading line, whole (the twin's multi-line `^...$`, run line by line).
static HEADING: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"\A[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?(?:constraints|decisions|current state|",
        r"next steps)(?:\*\*)?[ \t]*:?(?:\*\*)?[ \t\r]*\z",
    ))
});
// A regex of the literals, not an automaton: its SIMD prefilter skips the
// text several bytes at a time, where Aho-Corasick steps through each byte.
static ECHOES: LazyLock<Regex> = LazyLock::new(|| {
    let literals: Vec<String> = ECHO_MARKERS.iter().map(|m| regex::escape(m)).collect();
    Regex::new(&literals.join("|")).expect("escaped literals")
});

/// `(start, end)` of each heading line of `low`: only lines whose first
/// character past spaces can start one are matched.
fn headings(low: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        while start <= low.len() {
            let end =
                memchr::memchr(b'\n', &low.as_bytes()[start..]).map_or(low.len(), |i| start + i);
            let line = &low[start..end];
            let at = start;
            start = end + 1;
            let first = line.trim_start_matches([' ', '\t']).bytes().next();
            if matches!(first, Some(b'#' | b'*' | b'c' | b'd' | b'n')) && HEADING.is_match(line) {
                return Some((at, end));
            }
        }
        None
    })
}
// Only where a reply starts: an analysis may well quote a <body> tag.
static HTML: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"\A\s*(?:<!doctype\s+html|<\s*html(?:\s|>)|<\s*head\s*>|<\s*body(?:\s|>))")
});
// A whole page inside a summary (a mention of a tag is fine).
static HTML_PAGE: LazyLock<Regex> =
    LazyLock::new(|| compile(r"<!doctype\s+html|<\s*html(?:\s|>)(?s:.*)<\s*/\s*html\s*>"));
// A line of a summary that says the summary itself failed (a line that
// names a failure of the work, "failed to generate the PDF", is no such).
static FAILURE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"\A(?:error (?:while )?generating (?:the |a )?summary|(?:failed|",
        r"unable) to (?:generate|produce|write) (?:the |a )?summary|(?:failed|",
        r"unable) to summari[sz]e|could not (?:generate|produce|write) (?:the |a )?summary|",
        r"could not summari[sz]e|can(?:no|')?t (?:generate|produce|write) (?:the |a )?summary|",
        r"can(?:no|')?t summari[sz]e)",
    ))
});
// A line of a summary that refuses the task (not one that quotes a rule
// such as "I can't push to main").
static REFUSAL_LINE: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"\A(?:i'?m sorry|i am sorry|i apologi[sz]e|as an ai|i can(?:no|')t (?:help|assist|",
        r"comply|summari[sz]e|do that)|i cannot (?:help|assist|comply|summari[sz]e|do that)|",
        r"i(?:'m| am) (?:not able|unable) to (?:help|assist|comply|summari[sz]e)|i (?:won'?t|",
        r"will not) (?:help|assist|comply|summari[sz]e)|抱歉|对不起|很抱歉|我无法(?:总结|帮助|协助)|我不能(?:总结|",
        r"帮助|协助))",
    ))
});
const END: &str = r"(?:[^0-9a-z_]|\z)";
static ERROR_START: LazyLock<Regex> =
    LazyLock::new(|| {
        compile(&concat!(
            r#"\A\s*(?:error{END}|exception{END}|traceback{END}|fatal{END}|rate[ -]?limit|"#,
            r#"too many requests|internal server error|bad gateway|service unavailable|"#,
            r#"gateway time-?out|request failed|\{\s*"(?:error|detail)"|[0-9]{3}\s+(?:error|bad|"#,
            r#"internal|service|gateway|too|forbidden|unauthori[sz]ed|not found))"#,
        ).replace("{END}", END))
    });
static REFUSAL: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"\A\s*(?:i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i can(?:no|')t|i cannot|",
        r"i'?m (?:not able|unable)|i am (?:not able|unable)|i won'?t|i will not|as an ai|",
        r"unfortunately,? i|抱歉|对不起|很抱歉|我无法|我不能)",
    ))
});
static MARKUP: LazyLock<Regex> = LazyLock::new(|| {
    compile(&r"<\s*/?\s*(?:msg|transcript|segment|rules|analysis){END}".replace("{END}", END))
});

/// Whitespace as Python's `str.split()` and `str.strip()` see it: Unicode
/// `White_Space` plus the four information separators (U+001C..U+001F).
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn strip(text: &str) -> &str {
    text.trim_matches(is_space)
}

/// `text` with its ASCII letters lowered (same length, same offsets).
fn lowered(text: &str) -> String {
    text.to_ascii_lowercase()
}

/// What the guard decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// The summary's text (a slice of the reply) and its exact tokens.
    Kept { body: &'a str, tokens: usize },
    /// Why there is none.
    Rejected(String),
}

fn rejected<'a>(reason: impl Into<String>) -> Verdict<'a> {
    Verdict::Rejected(reason.into())
}

/// `None` if `text` has every section heading once, in order, each followed
/// by something; else what is wrong.
pub fn check_sections(text: &str) -> Option<String> {
    sections_problem(text, &lowered(text))
}

/// [`check_sections`] with `text`'s lowered form at hand.
fn sections_problem(text: &str, low: &str) -> Option<String> {
    // A heading line holds exactly one section name (none holds another).
    let found: Vec<(&str, usize, usize)> = headings(low)
        .map(|(start, end)| {
            let line = &low[start..end];
            let name = SECTIONS
                .into_iter()
                .find(|s| line.contains(s))
                .expect("a heading names its section");
            (name, start, end)
        })
        .collect();
    for (section, shown) in SECTIONS.iter().zip(SECTION_NAMES) {
        let count = found.iter().filter(|(name, _, _)| name == section).count();
        if count != 1 {
            return Some(format!(
                "section '{shown}' appears {count} times (expected once)"
            ));
        }
    }
    if found.iter().map(|(name, _, _)| *name).ne(SECTIONS) {
        return Some(format!(
            "sections out of order (expected {})",
            SECTION_NAMES.join(", ")
        ));
    }
    if !strip(&text[..found[0].1]).is_empty() {
        return Some("text before the first section".into());
    }
    let mut said = false;
    for (i, (_, _, end)) in found.iter().enumerate() {
        let stop = found.get(i + 1).map_or(text.len(), |next| next.1);
        let content = strip(&low[*end..stop]);
        if content.is_empty() {
            return Some(format!("section '{}' is empty", SECTION_NAMES[i]));
        }
        said |= i > 0 && !says_nothing(content);
    }
    if !said {
        return Some("the summary says nothing (every section after Constraints is none)".into());
    }
    None
}

/// The line without its list bullet (`-`, `*` or `•`) and the spaces around.
fn unbulleted(line: &str) -> &str {
    let line = strip(line);
    strip(line.strip_prefix(['-', '*', '•']).unwrap_or(line))
}

/// Whether a section's (lowered) content is only "none" lines.
fn says_nothing(content: &str) -> bool {
    content
        .lines()
        .map(unbulleted)
        .filter(|line| !line.is_empty())
        .all(|line| NOTHING.contains(&line))
}

/// The summary inside `reply`, or why there is none.
fn summary_body(reply: &str, low: &str) -> Result<(usize, usize), String> {
    let opens: Vec<_> = OPEN.find_iter(low).collect();
    let closes: Vec<_> = CLOSE.find_iter(low).collect();
    if opens.is_empty() {
        return Err("no <summary> in the reply".into());
    }
    if opens.len() > 1 || closes.len() > 1 {
        return Err(format!(
            "{} <summary> and {} </summary> tags (expected one each)",
            opens.len(),
            closes.len()
        ));
    }
    let Some(close) = closes.first() else {
        return Err("the <summary> is not closed".into());
    };
    let (start, end) = (opens[0].end(), close.start());
    if end < start {
        return Err("</summary> comes before <summary>".into());
    }
    if !strip(&reply[close.end()..]).is_empty() {
        return Err("text after </summary>".into());
    }
    Ok((start, end))
}

/// The guard: the summary of `reply` if it passes every check, else why not.
///
/// `covered` is the text the summary may name; `max_tokens` bounds it;
/// `count_up_to(text, limit)` counts exactly, stopping past `limit`.
pub fn check_reply<'a>(
    reply: &'a str,
    covered: &str,
    max_tokens: usize,
    count_up_to: impl Fn(&str, usize) -> usize,
) -> Verdict<'a> {
    if strip(reply).is_empty() {
        return rejected("the reply is empty");
    }
    let low = lowered(reply);
    if HTML.is_match(&low) {
        return rejected("the reply is an HTML page");
    }
    if ERROR_START.is_match(&low) {
        return rejected("the reply is an error message");
    }
    if REFUSAL.is_match(&low) {
        return rejected("the reply is a refusal");
    }
    let (start, end) = match summary_body(reply, &low) {
        Ok(range) => range,
        Err(reason) => return Verdict::Rejected(reason),
    };
    let body = strip(&reply[start..end]);
    if body.is_empty() {
        return rejected("the <summary> is empty");
    }
    // Lowering keeps every offset, so the body's lowered form is a slice.
    let offset = body.as_ptr() as usize - reply.as_ptr() as usize;
    let body_low = &low[offset..offset + body.len()];
    if ERROR_START.is_match(body_low) {
        return rejected("the summary is an error message");
    }
    if REFUSAL.is_match(body_low) {
        return rejected("the summary is a refusal");
    }
    if HTML_PAGE.is_match(body_low) {
        return rejected("the summary holds an HTML page");
    }
    for line in body_low.lines().map(unbulleted) {
        if REFUSAL_LINE.is_match(line) {
            return rejected("the summary holds a refusal");
        }
        if FAILURE_LINE.is_match(line) {
            return rejected("the summary holds an error message");
        }
    }
    if MARKUP.is_match(body_low) {
        return rejected("the summary holds the prompt's markup");
    }
    if ECHOES.is_match(body_low) {
        return rejected("the summary echoes the prompt");
    }
    if let Some(problem) = sections_problem(body, body_low) {
        return Verdict::Rejected(problem);
    }
    let tokens = count_up_to(body, max_tokens);
    if tokens > max_tokens {
        return Verdict::Rejected(format!(
            "the summary is over its bound of {max_tokens} tokens"
        ));
    }
    let (ids, files) = named(body);
    for id in ids {
        if !occurs(id, covered) {
            return Verdict::Rejected(format!(
                "the summary names tool call '{id}', which the covered messages do not hold"
            ));
        }
    }
    for file in files {
        if !occurs(file, covered) {
            return Verdict::Rejected(format!(
                "the summary names the file '{file}', which the covered messages do not hold"
            ));
        }
    }
    Verdict::Kept { body, tokens }
}

#[cfg(test)]
mod tests;
