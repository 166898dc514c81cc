//! Tags that tell the selection policies what a message is worth: `constraint`
//! (the user's rules), `evidence` (the agent's THINK/PLAN/VERIFY reasoning),
//! `pulse` (task verbs) and `log` (curl, URLs, stack traces: noise).
//!
//! Keywords are matched on normalised text ([`normalize`]): English keywords
//! on word boundaries, keywords in other scripts as substrings with
//! punctuation and spaces removed, markers (`<think>`, `http://`) as
//! substrings of the lower-cased text. Defaults cover Chinese and English;
//! every list can be replaced. Tags are cached by content hash.

pub mod normalize;

use crate::cache::text_key;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use std::sync::Arc;

use crate::error::{Error, Result};
use normalize::{forms, forms_for_tagging};

/// Texts shorter than this are tagged directly: the matchers cost less than
/// hashing and a lookup.
const MIN_CACHED_BYTES: usize = 32;

/// The user states a rule: must, never, ensure, 必须, 禁止...
pub const CONSTRAINT: u8 = 1 << 0;
/// The agent reasons: THINK / PLAN / VERIFY blocks.
pub const EVIDENCE: u8 = 1 << 1;
/// The user gives a task: fix, implement, 修复, 实现...
pub const PULSE: u8 = 1 << 2;
/// Machine output: curl commands, URLs, stack traces.
pub const LOG: u8 = 1 << 3;

/// Tag names, in bit order.
pub const NAMES: [(&str, u8); 4] = [
    ("constraint", CONSTRAINT),
    ("evidence", EVIDENCE),
    ("pulse", PULSE),
    ("log", LOG),
];

pub const DEFAULT_CONSTRAINT_KEYWORDS: &[&str] = &[
    // English
    "must",
    "must not",
    "mustn't",
    "never",
    "always",
    "ensure",
    "make sure",
    "required",
    "requirement",
    "do not",
    "don't",
    "forbidden",
    "prohibited",
    "not allowed",
    "shall",
    "only use",
    "constraint",
    "schema",
    "mandatory",
    // Rules said without the words above, which compaction would otherwise
    // summarise away, in words chat uses for little else. A tagged message
    // is carried whole by later summaries, so words a question or a bug
    // report uses too stay out: "how do I avoid", "this should not
    // happen", "returns at most 100 rows", "uses only one core".
    "refrain",
    "under no circumstances",
    "at all times",
    // Chinese
    "必须",
    "禁止",
    "确保",
    "验证",
    "务必",
    "一定要",
    "不得",
    "不要",
    "不能",
    "严禁",
    "只能",
    "保证",
    "要求",
    "约束",
    "规范",
    "不允许",
    "切勿",
    // Matched with punctuation and spaces removed, inside any word: so not
    // 别改 (级别改, 分别改), 勿 alone (稍安勿躁), 不准改 ("不准，改成 UTC"),
    // 避免 or 不超过 (怎么避免, 不超过 100ms 已经挺快了).
    "请勿",
    "勿删",
    "勿改",
    "勿动",
    "千万别",
    "不许",
    "仅限",
];

/// Rule words that count only where a sentence starts ("Avoid touching
/// prod.", "- 别动生产配置"): an imperative there, where elsewhere they ask
/// or report ("how do I avoid...", "怎么避免", 级别改 holds 别改). A sentence
/// starts the text, a line, or follows `。`, one of `.!?;:` before a space
/// or another script, or a comma before another script; a bullet, a list
/// number and "please" / 请 are passed over; one that asks (ends in `?`)
/// states no rule.
pub const DEFAULT_CONSTRAINT_OPENERS: &[&str] =
    &["avoid", "避免", "别动", "别删", "别改", "别碰", "别用"];

pub const DEFAULT_PULSE_KEYWORDS: &[&str] = &[
    // English
    "fix",
    "implement",
    "add",
    "update",
    "refactor",
    "remove",
    "delete",
    "rename",
    "verify",
    "check",
    "test",
    "run",
    "deploy",
    "create",
    "write",
    "change",
    "migrate",
    "optimize",
    // Chinese
    "修复",
    "实现",
    "添加",
    "增加",
    "更新",
    "重构",
    "删除",
    "移除",
    "重命名",
    "检查",
    "测试",
    "运行",
    "部署",
    "创建",
    "编写",
    "修改",
    "迁移",
    "优化",
];

pub const DEFAULT_EVIDENCE_MARKERS: &[&str] = &[
    "<think",
    "[think",
    "think:",
    "<plan",
    "[plan",
    "plan:",
    "<verify",
    "[verify",
    "verify:",
    "<thinking",
    "<reasoning",
    "思考:",
    "计划:",
    "验证:",
];

pub const DEFAULT_LOG_MARKERS: &[&str] = &[
    "curl ",
    "wget ",
    "http://",
    "https://",
    "traceback (most recent call last)",
    "exception in thread",
    "stacktrace",
    "stack trace",
    "\n    at ",
    "\n\tat ",
    "npm err!",
    "panicked at",
    "segmentation fault",
    "core dumped",
];

/// Keyword lists for a [`Tagger`].
#[derive(Clone, Debug)]
pub struct Keywords {
    pub constraint: Vec<String>,
    /// Constraint words that count only where a sentence starts.
    pub constraint_openers: Vec<String>,
    pub pulse: Vec<String>,
    pub evidence: Vec<String>,
    pub log: Vec<String>,
}

impl Default for Keywords {
    fn default() -> Self {
        let own = |list: &[&str]| list.iter().map(|k| (*k).to_owned()).collect();
        Self {
            constraint: own(DEFAULT_CONSTRAINT_KEYWORDS),
            constraint_openers: own(DEFAULT_CONSTRAINT_OPENERS),
            pulse: own(DEFAULT_PULSE_KEYWORDS),
            evidence: own(DEFAULT_EVIDENCE_MARKERS),
            log: own(DEFAULT_LOG_MARKERS),
        }
    }
}

/// One automaton over one form of the text for several tags at once: each
/// pattern carries the tags it stands for (a keyword may be in two lists).
struct Patterns {
    automaton: Option<AhoCorasick>,
    /// Whether any pattern occurs at all, asked first where most texts hold
    /// none (markers, keywords of other scripts). A leftmost search can skip
    /// ahead with a vectorised prefilter, which the overlapping search that
    /// names every tag cannot: 0.05 against 0.28 us on a 170-byte message.
    screen: Option<AhoCorasick>,
    tags: Vec<u8>,
    all: u8,
}

impl Patterns {
    /// `screened`: with a [`Patterns::screen`].
    fn new(patterns: Vec<(Vec<u8>, u8)>, screened: bool) -> Result<Self> {
        let mut merged: Vec<(Vec<u8>, u8)> = Vec::new();
        for (pattern, tag) in patterns {
            match merged.iter_mut().find(|(p, _)| *p == pattern) {
                Some((_, tags)) => *tags |= tag,
                None => merged.push((pattern, tag)),
            }
        }
        let texts: Vec<&[u8]> = merged.iter().map(|(p, _)| p.as_slice()).collect();
        let tags: Vec<u8> = merged.iter().map(|(_, t)| *t).collect();
        let nonempty = !texts.is_empty();
        Ok(Self {
            automaton: nonempty
                .then(|| automaton(&texts, MatchKind::Standard))
                .transpose()?,
            screen: (nonempty && screened)
                .then(|| automaton(&texts, MatchKind::LeftmostFirst))
                .transpose()?,
            all: tags.iter().fold(0, |acc, t| acc | t),
            tags,
        })
    }

    /// The tags of every pattern found in `text` where `accept` allows,
    /// in one pass (stopping once every tag it can give is found).
    fn find(&self, text: &[u8], accept: impl Fn(usize, usize) -> bool) -> u8 {
        let Some(automaton) = &self.automaton else {
            return 0;
        };
        // No match at all for the leftmost search means no pattern occurs.
        if self
            .screen
            .as_ref()
            .is_some_and(|screen| !screen.is_match(text))
        {
            return 0;
        }
        let mut found = 0;
        for m in automaton.find_overlapping_iter(text) {
            if found & self.tags[m.pattern().as_usize()] == self.tags[m.pattern().as_usize()] {
                continue;
            }
            if accept(m.start(), m.end()) {
                found |= self.tags[m.pattern().as_usize()];
                if found == self.all {
                    break;
                }
            }
        }
        found
    }
}

/// Keywords of the word-like tags (constraint, pulse): English words on word
/// boundaries of the spaced form, others as substrings of the squeezed form.
fn word_patterns(
    keywords: &[String],
    what: &str,
    tag: u8,
    words: &mut Vec<(Vec<u8>, u8)>,
    squeezed: &mut Vec<(Vec<u8>, u8)>,
) -> Result<()> {
    for keyword in keywords {
        let form = forms(keyword);
        if form.squeezed.is_empty() {
            return Err(Error::InvalidValue {
                path: what.to_owned(),
                reason: format!("keyword {keyword:?} has no letters or digits"),
            });
        }
        if form
            .spaced
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b' ')
        {
            words.push((form.spaced, tag));
        } else {
            squeezed.push((form.squeezed, tag));
        }
    }
    Ok(())
}

fn automaton(patterns: &[&[u8]], kind: MatchKind) -> Result<AhoCorasick> {
    // A DFA: a few hundred states for keyword lists, and the fastest search.
    AhoCorasick::builder()
        .kind(Some(AhoCorasickKind::DFA))
        .match_kind(kind)
        .build(patterns)
        .map_err(|error| Error::InvalidValue {
            path: "keywords".to_owned(),
            reason: error.to_string(),
        })
}

/// Tags texts; compiled once, thread-safe, with a cache of results.
pub struct Tagger {
    /// Constraint and pulse words, on word boundaries of the spaced form.
    words: Patterns,
    /// Constraint and pulse keywords of other scripts, in the squeezed form.
    squeezed: Patterns,
    /// Evidence and log markers, in the lowered form.
    markers: Patterns,
    /// Constraint words that count where a sentence starts, lowered.
    openers: Vec<Vec<u8>>,
    /// Masks by text key, with the pass bits; `None`: [`Tagger::uncached`].
    /// Shared with the taggers made by [`Tagger::sharing_cache`].
    cache: Option<Arc<quick_cache::sync::Cache<u128, u8>>>,
    /// Texts shorter than this are tagged without the cache.
    cache_from: usize,
}

impl Tagger {
    pub fn new(keywords: &Keywords) -> Result<Self> {
        let (mut words, mut squeezed) = (Vec::new(), Vec::new());
        word_patterns(
            &keywords.constraint,
            "constraint_keywords",
            CONSTRAINT,
            &mut words,
            &mut squeezed,
        )?;
        word_patterns(
            &keywords.pulse,
            "pulse_keywords",
            PULSE,
            &mut words,
            &mut squeezed,
        )?;
        let mut openers = Vec::new();
        for opener in &keywords.constraint_openers {
            let form = forms(opener);
            if form.squeezed.is_empty() {
                return Err(Error::InvalidValue {
                    path: "constraint_openers".to_owned(),
                    reason: format!("opener {opener:?} has no letters or digits"),
                });
            }
            openers.push(form.lowered);
        }
        let mut markers = Vec::new();
        for (list, tag) in [(&keywords.evidence, EVIDENCE), (&keywords.log, LOG)] {
            markers.extend(
                list.iter()
                    .map(|m| forms(m).lowered)
                    .filter(|m| !m.is_empty())
                    .map(|m| (m, tag)),
            );
        }
        Ok(Self {
            // Common short words defeat the prefilter: no screen (measured).
            words: Patterns::new(words, false)?,
            squeezed: Patterns::new(squeezed, true)?,
            markers: Patterns::new(markers, true)?,
            openers,
            cache: Some(Arc::new(quick_cache::sync::Cache::new(16_384))),
            cache_from: MIN_CACHED_BYTES,
        })
    }

    /// Whether results are cached (see [`Tagger::uncached`]).
    pub fn caches(&self) -> bool {
        self.cache.is_some()
    }

    /// This tagger without its cache: for texts tagged once, such as
    /// messages appended to a log (their tags are kept in its headers).
    #[must_use]
    pub fn uncached(self) -> Self {
        Self {
            cache: None,
            ..self
        }
    }

    /// This tagger, leaving the tags of texts of at least `bytes` in
    /// `other`'s cache: a log tags each message once, into its header, and
    /// its long tool outputs are what selection tags again the turn they
    /// arrive. `other` must tag alike (the same keyword lists); shorter texts
    /// cost little to tag again and would only evict what selection reuses.
    #[must_use]
    pub fn sharing_cache(self, other: &Tagger, bytes: usize) -> Self {
        Self {
            cache: other.cache.clone(),
            cache_from: bytes.max(MIN_CACHED_BYTES),
            ..self
        }
    }

    /// Every tag whose keywords occur in `text`, as a bit mask.
    pub fn tag(&self, text: &str) -> u8 {
        self.tag_wanted(text, None, ALL)
    }

    /// [`Tagger::tag`] with `key` = [`text_key`]`(text)` already computed
    /// (the count cache's key for the same text).
    pub fn tag_keyed(&self, text: &str, key: u128) -> u8 {
        self.tag_wanted(text, Some(key), ALL)
    }

    /// The tags of `wanted` found in `text`. Only the passes that can find
    /// one of them run: an assistant's text, which can only be evidence or a
    /// log, is matched against the markers alone. The cache remembers which
    /// passes ran, so a later call wanting more runs just the missing ones.
    pub fn tag_wanted(&self, text: &str, key: Option<u128>, wanted: u8) -> u8 {
        let needed = passes_for(wanted);
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| text.len() >= self.cache_from)
        else {
            return self.run_passes(text, needed) & wanted;
        };
        let key = key.unwrap_or_else(|| text_key(text));
        let known = cache.get(&key).unwrap_or(0);
        let missing = needed & !known;
        if missing == 0 {
            return known & wanted;
        }
        let merged = known | self.run_passes(text, missing);
        cache.insert(key, merged);
        merged & wanted
    }

    /// The tags `passes` find, with the pass bits themselves.
    fn run_passes(&self, text: &str, passes: u8) -> u8 {
        if passes == MARKER_PASS {
            return self
                .markers
                .find(normalize::lowered(text).as_bytes(), |_, _| true)
                | passes;
        }
        let text = forms_for_tagging(text);
        let spaced = &text.spaced;
        let on_word_boundaries = |start: usize, end: usize| {
            let before = start.checked_sub(1).map(|i| spaced[i]);
            let after = spaced.get(end).copied();
            !before.is_some_and(|b| b.is_ascii_alphanumeric())
                && !after.is_some_and(|b| b.is_ascii_alphanumeric())
        };
        let mut mask = passes;
        if !text.squeezed.is_empty() {
            mask |= self.squeezed.find(&text.squeezed, |_, _| true);
        }
        if mask & self.words.all != self.words.all {
            mask |= self.words.find(&text.spaced, on_word_boundaries);
        }
        if mask & CONSTRAINT == 0 && opens_a_sentence(&text.lowered, &self.openers) {
            mask |= CONSTRAINT;
        }
        if passes & MARKER_PASS != 0 {
            mask |= self.markers.find(&text.lowered, |_, _| true);
        }
        mask
    }
}

/// The ideographic full stop, which ends a sentence with no space after it.
const FULL_STOP: &[u8] = "。".as_bytes();

/// Whether a sentence of `lowered` (a text's lowered form) starts with one
/// of `openers` (see [`DEFAULT_CONSTRAINT_OPENERS`]) and is no question: an
/// ASCII opener as a whole word (not in `avoid-list` or `avoid_cache`), and
/// no `?` before the statement ends (`.`, `!`, `。` or a line break).
fn opens_a_sentence(lowered: &[u8], openers: &[Vec<u8>]) -> bool {
    if openers.is_empty() {
        return false;
    }
    // The end of the statement last looked at and whether it asks: the
    // clauses of one sentence share it, so the text is scanned once.
    let mut asked: Option<(usize, bool)> = None;
    let mut at = 0;
    loop {
        let (plain, body) = sentence_body(lowered, at);
        let opens = [plain, body]
            .iter()
            .any(|&i| openers.iter().any(|o| opens_with(&lowered[i..], o)));
        if opens {
            let question = match asked {
                Some((end, question)) if body < end => question,
                _ => {
                    let (end, question) = statement_end(lowered, body);
                    asked = Some((end, question));
                    question
                }
            };
            if !question {
                return true;
            }
        }
        match next_sentence(lowered, at) {
            Some(next) => at = next,
            None => return false,
        }
    }
}

/// Whether `rest` starts with `opener`, an ASCII one as a whole word.
fn opens_with(rest: &[u8], opener: &[u8]) -> bool {
    let joined = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    rest.starts_with(opener)
        && !(opener.last().is_some_and(u8::is_ascii_alphanumeric)
            && rest.get(opener.len()).is_some_and(joined))
}

/// Where the statement from `at` ends (its `.`, `!`, `?`, `。` or line
/// break, or the text's end) and whether it ends with `?`.
fn statement_end(lowered: &[u8], at: usize) -> (usize, bool) {
    for i in at..lowered.len() {
        match lowered[i] {
            b'?' => return (i, true),
            b'.' | b'!' | b'\n' => return (i, false),
            _ if lowered[i..].starts_with(FULL_STOP) => return (i, false),
            _ => {}
        }
    }
    (lowered.len(), false)
}

/// Where the next sentence (or clause) after `at` starts: after a line
/// break or `。`; after one of `.!?;:` followed by white space or another
/// script (full-width `！？；：` are these once normalised, with no space
/// after them); after a comma followed by another script (`好的，别动`).
fn next_sentence(lowered: &[u8], at: usize) -> Option<usize> {
    let mut i = at;
    while i < lowered.len() {
        let byte = lowered[i];
        if byte == b'\n' {
            return Some(i + 1);
        }
        if lowered[i..].starts_with(FULL_STOP) {
            return Some(i + FULL_STOP.len());
        }
        let next = lowered.get(i + 1);
        let ends = b".!?;:".contains(&byte)
            && next.is_some_and(|b| b.is_ascii_whitespace() || !b.is_ascii());
        if ends || (byte == b',' && next.is_some_and(|b| !b.is_ascii())) {
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// Where a sentence's words start from `at`: white space, a bullet (`-`,
/// `*`, `•`, `–`), a list number (`1.`, `2)`, `3、`) passed over; and
/// where they start past a "please" / 请 as well (an opener may hold it).
/// White space up to a line break only: the break starts the next sentence,
/// which skips what follows it, so a text of blank lines is read once, not
/// once per line (quadratic: 40,000 of them took 0.5 s).
fn sentence_body(lowered: &[u8], at: usize) -> (usize, usize) {
    const LIST_COMMA: &[u8] = "、".as_bytes();
    let skip_space = |mut i: usize| {
        while lowered
            .get(i)
            .is_some_and(|&b| b != b'\n' && b.is_ascii_whitespace())
        {
            i += 1;
        }
        i
    };
    let mut i = skip_space(at);
    let rest = &lowered[i..];
    if rest.starts_with(b"- ") || rest.starts_with(b"* ") {
        i += 2;
    } else if let Some(bullet) = ["•", "– "].iter().find(|b| rest.starts_with(b.as_bytes())) {
        i += bullet.len();
    } else {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && rest[digits..].starts_with(LIST_COMMA) {
            i += digits + LIST_COMMA.len();
        } else if digits > 0
            && matches!(rest.get(digits), Some(b'.' | b')'))
            && rest.get(digits + 1).is_some_and(u8::is_ascii_whitespace)
        {
            i += digits + 1;
        }
    }
    i = skip_space(i);
    for polite in [&b"please "[..], "请".as_bytes()] {
        if lowered[i..].starts_with(polite) {
            return (i, skip_space(i + polite.len()));
        }
    }
    (i, i)
}

/// Every tag.
const ALL: u8 = CONSTRAINT | EVIDENCE | PULSE | LOG;
/// Cache bits above the tags: which passes a cached mask has run.
/// Keyword passes (the spaced and squeezed forms) find constraint and pulse;
const WORD_PASS: u8 = 1 << 6;
/// the marker pass (the lowered form) finds evidence and log.
const MARKER_PASS: u8 = 1 << 7;

fn passes_for(wanted: u8) -> u8 {
    let mut passes = 0;
    if wanted & (CONSTRAINT | PULSE) != 0 {
        passes |= WORD_PASS;
    }
    if wanted & (EVIDENCE | LOG) != 0 {
        passes |= MARKER_PASS;
    }
    passes
}

/// The tag names of a mask.
pub fn names(mask: u8) -> Vec<&'static str> {
    NAMES
        .iter()
        .filter(|(_, bit)| mask & bit != 0)
        .map(|(name, _)| *name)
        .collect()
}

/// The mask of tag names; unknown names are an error.
pub fn mask_of<'n>(names: impl IntoIterator<Item = &'n str>) -> Result<u8> {
    let mut mask = 0;
    for name in names {
        let bit = NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, bit)| *bit)
            .ok_or_else(|| Error::InvalidValue {
                path: "tags".to_owned(),
                reason: format!("unknown tag {name:?} (known: constraint, evidence, pulse, log)"),
            })?;
        mask |= bit;
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Lcg;

    fn tagger() -> Tagger {
        Tagger::new(&Keywords::default()).unwrap()
    }

    #[test]
    fn an_opener_counts_only_where_a_sentence_starts() {
        let t = tagger();
        for rule in [
            "Avoid touching prod.",
            "Fix it. Avoid touching prod.",
            "- avoid globals",
            "2) Please avoid sudo",
            "好的。别动配置",
        ] {
            assert_eq!(t.tag(rule) & CONSTRAINT, CONSTRAINT, "{rule}");
        }
        for chat in [
            "How do I avoid it?",
            "avoidance",
            "级别改成 DEBUG",
            "v1.avoid",
        ] {
            assert_eq!(t.tag(chat) & CONSTRAINT, 0, "{chat}");
        }
    }

    #[test]
    fn a_chinese_rule_is_a_constraint_in_any_punctuation() {
        let t = tagger();
        for text in [
            "为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性",
            "为PaymentCallbackService.addRetryLogic方法添加超时重试,必须保证事务一致性",
            "为PaymentCallbackService.addRetryLogic方法添加超时重试。必须·保证「事务」一致性！",
            "为ＰａｙｍｅｎｔＣａｌｌｂａｃｋＳｅｒｖｉｃｅ方法添加超时重试；必须保证事务一致性",
        ] {
            assert!(t.tag(text) & CONSTRAINT != 0, "{text}");
        }
    }

    #[test]
    fn curl_and_stack_traces_are_logs() {
        let t = tagger();
        let text = "curl -X POST http://localhost:8080/callback -d '{}'\n\
                    Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>";
        assert_eq!(t.tag(text) & LOG, LOG);
        assert_eq!(
            t.tag("java.lang.NullPointerException\n    at com.acme.Pay.run(Pay.java:42)") & LOG,
            LOG
        );
    }

    #[test]
    fn english_words_match_on_boundaries_only() {
        let t = tagger();
        assert!(t.tag("You MUST use snake_case.") & CONSTRAINT != 0);
        assert!(t.tag("Don't touch the schema") & CONSTRAINT != 0);
        assert_eq!(t.tag("Pass the mustard") & CONSTRAINT, 0);
        assert!(t.tag("<THINK> the test fails because X</THINK>") & EVIDENCE != 0);
        assert!(t.tag("Please fix the login bug") & PULSE != 0);
        assert_eq!(t.tag("a prefix and a suffix"), 0);
    }

    #[test]
    fn only_the_wanted_passes_run_and_the_cache_fills_in_the_rest() {
        let texts = [
            "<THINK> the test must pass; curl http://x before you fix it",
            "为方法添加超时重试，必须保证事务一致性 <plan> then run the deploy",
            "short: must",
            "nothing to see in this long enough sentence at all, really",
        ];
        let wanted = [EVIDENCE | LOG, LOG, CONSTRAINT, CONSTRAINT | PULSE, ALL];
        for text in texts {
            let full = tagger().tag(text);
            for first in wanted {
                for second in wanted {
                    let t = tagger();
                    assert_eq!(t.tag_wanted(text, None, first), full & first, "{text}");
                    assert_eq!(t.tag_wanted(text, None, second), full & second, "{text}");
                    assert_eq!(t.tag(text), full, "{text}");
                }
            }
        }
    }

    #[test]
    fn a_tagger_sharing_a_cache_leaves_only_long_texts_in_it() {
        let owner = tagger();
        let sharer = tagger().sharing_cache(&owner, 64);
        let cached = || owner.cache.as_ref().map_or(0, |c| c.len());
        let long = "the deploy must not run before the migration; ".repeat(3);
        let short = "a shorter text: it must never be cached";
        assert_eq!(sharer.tag(short), owner.tag(short));
        assert_eq!(cached(), 1, "the short text, by its owner alone");
        let tags = sharer.tag(&long);
        assert_eq!(cached(), 2, "the long text, by the sharer");
        assert_ne!(tags & CONSTRAINT, 0);
        assert_eq!(owner.tag(&long), tags);
        assert!(!tagger().sharing_cache(&tagger().uncached(), 64).caches());
    }

    #[test]
    fn an_uncached_tagger_tags_alike() {
        let (cached, uncached) = (tagger(), tagger().uncached());
        for text in [
            "<THINK> the test must pass; curl http://x before you fix it",
            "为方法添加超时重试，必须保证事务一致性",
            "short: must",
        ] {
            for wanted in [ALL, LOG, CONSTRAINT | PULSE] {
                assert_eq!(
                    uncached.tag_wanted(text, None, wanted),
                    cached.tag_wanted(text, None, wanted)
                );
            }
        }
    }

    #[test]
    fn a_screen_never_changes_what_is_found() {
        let markers: Vec<(Vec<u8>, u8)> = DEFAULT_EVIDENCE_MARKERS
            .iter()
            .map(|m| (m.as_bytes().to_vec(), EVIDENCE))
            .chain(
                DEFAULT_LOG_MARKERS
                    .iter()
                    .map(|m| (m.as_bytes().to_vec(), LOG)),
            )
            .chain([(b"ab".to_vec(), PULSE), (b"b".to_vec(), CONSTRAINT)])
            .collect();
        let (plain, screened) = (
            Patterns::new(markers.clone(), false).unwrap(),
            Patterns::new(markers.clone(), true).unwrap(),
        );
        // Texts of pattern pieces, overlapping and nested, and filler.
        let mut pieces: Vec<&[u8]> = markers.iter().map(|(p, _)| p.as_slice()).collect();
        pieces.extend([&b"a"[..], b" ", b"x", b"thin", "思".as_bytes(), b"<"]);
        let mut random = Lcg::new(0x51_7CC1_B727_220A);
        for _ in 0..20_000 {
            let mut text = Vec::new();
            for _ in 0..random.below(6) {
                let piece = pieces[random.below(pieces.len())];
                // Sometimes only part of a piece.
                let cut = if random.below(2) == 0 {
                    piece.len()
                } else {
                    piece.len() / 2
                };
                text.extend_from_slice(&piece[..cut]);
            }
            let accept = |start: usize, _| start % 3 != 1;
            assert_eq!(
                screened.find(&text, accept),
                plain.find(&text, accept),
                "{:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    #[test]
    fn names_round_trip_and_bad_keywords_are_refused() {
        assert_eq!(mask_of(names(CONSTRAINT | LOG)), Ok(CONSTRAINT | LOG));
        assert!(mask_of(["urgent"]).is_err());
        let bad = Keywords {
            constraint: vec!["!!!".to_owned()],
            ..Keywords::default()
        };
        assert!(Tagger::new(&bad).is_err());
    }
}
