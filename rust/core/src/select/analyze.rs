//! Reading a history for selection: per message its exact token count (tool
//! results capped first), tags and metadata; then the units no policy may
//! split: an assistant tool call with all its results, or a single message.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use memchr::memmem;
use regex::Regex;

use crate::cache::MIN_CACHED_BYTES;
use crate::chat::MessageFields;
use crate::error::{Error, Result};
use crate::json::{JsonValue, Kind, wrong_type};
use crate::tags::{self, EVIDENCE, Tagger};
use crate::tokenizer::Tokenizer;

/// Message keys that carry selection metadata; they are not sent to the API.
pub const METADATA_KEYS: &[&str] = &[
    "pinned",
    "priority",
    "weight",
    "tags",
    "timestamp",
    "id",
    "depends_on",
];

/// Marker appended to a capped tool result (`{dropped}` is the number of tokens cut).
pub const TRUNCATION_MARKER: &str = "…[truncated {dropped} tokens]";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
    Other,
}

/// What selection knows of one message.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)] // independent facts about one message
pub struct MessageInfo {
    pub role: Role,
    /// Exact tokens of the message as it will be sent (tool results capped).
    pub tokens: usize,
    /// Tag mask: given by the caller (`tags`), else found in the text.
    pub tags: u8,
    pub pinned: bool,
    pub priority: f64,
    pub weight: Option<f64>,
    pub timestamp: Option<f64>,
    pub id: Option<String>,
    pub depends_on: Vec<String>,
    /// Holds tool calls (OpenAI `tool_calls`, Anthropic `tool_use`).
    pub calls: bool,
    /// Holds tool results (an OpenAI tool message, Anthropic `tool_result` blocks).
    pub results: bool,
    /// Holds any text of its own (not only tool results).
    pub has_text: bool,
    /// Has any of [`METADATA_KEYS`] (even set to `None`): not sent as it is.
    pub has_metadata: bool,
}

/// A tool result cut to the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub message: usize,
    /// The `tool_result` block (Anthropic); `None` for an OpenAI tool message.
    pub block: Option<usize>,
    /// The text block inside that `tool_result`'s content list, if it is
    /// one (with no block: the text part of the tool message's own content).
    pub part: Option<usize>,
    /// Shared with the cache of capped forms.
    pub text: Arc<str>,
    pub before: usize,
    pub after: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    /// System or developer messages: always kept, placed first.
    System,
    /// Messages marked `pinned`: always kept.
    Pinned,
    /// The turn in progress: the newest user message that starts a turn and
    /// every unit after it (the loop the model is in). Always kept.
    Current,
    Normal,
}

/// Messages no policy may separate.
#[derive(Clone, Debug)]
pub struct Unit {
    /// Message range `[start, end)`.
    pub start: usize,
    pub end: usize,
    pub tokens: usize,
    pub kind: UnitKind,
    pub tags: u8,
    /// Starts a turn: a user message with text of its own.
    pub turn_start: bool,
    /// The heaviest of its messages' [`UnitFacts::weight`]s (NaN when not weighed).
    pub weight: f64,
}

#[derive(Clone, Debug)]
pub struct Analysis {
    pub messages: Vec<MessageInfo>,
    pub units: Vec<Unit>,
    pub truncations: Vec<Truncation>,
}

impl Analysis {
    pub fn unit_of(&self, message: usize) -> Option<usize> {
        self.units
            .iter()
            .position(|u| u.start <= message && message < u.end)
    }

    /// Tokens of every message together.
    pub fn total_tokens(&self) -> usize {
        self.units.iter().map(|u| u.tokens).sum()
    }

    /// The first unit that starts a turn (the first user message).
    pub fn first_turn(&self) -> Option<usize> {
        self.units.iter().position(|u| u.turn_start)
    }

    /// Units that start a turn, in order.
    pub fn turn_starts(&self) -> Vec<usize> {
        (0..self.units.len())
            .filter(|&u| self.units[u].turn_start)
            .collect()
    }

    /// The messages of `units` (sorted), and the messages of every other unit.
    /// Unknown unit numbers are ignored.
    pub fn expand(&self, units: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let mut keep = vec![false; self.units.len()];
        for &u in units {
            if let Some(slot) = keep.get_mut(u) {
                *slot = true;
            }
        }
        let (mut kept, mut dropped) = (Vec::new(), Vec::new());
        for (unit, &keep) in self.units.iter().zip(&keep) {
            let side = if keep { &mut kept } else { &mut dropped };
            side.extend(unit.start..unit.end);
        }
        (kept, dropped)
    }

    /// `(message, id)` for each kept message whose `depends_on` names a message
    /// that is not kept (in message order; an id given twice means its last
    /// message). Ids of no message are not reported: nothing was dropped.
    pub fn missing_dependencies(&self, kept: &[usize]) -> Vec<(usize, String)> {
        if self.messages.iter().all(|m| m.depends_on.is_empty()) {
            return Vec::new();
        }
        let position: HashMap<&str, usize> = self
            .messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.id.as_deref().map(|id| (id, i)))
            .collect();
        let mut is_kept = vec![false; self.messages.len()];
        let mut order: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|&i| i < self.messages.len())
            .collect();
        order.sort_unstable();
        order.dedup();
        for &i in &order {
            is_kept[i] = true;
        }
        let mut missing = Vec::new();
        for &i in &order {
            for dependency in &self.messages[i].depends_on {
                if position
                    .get(dependency.as_str())
                    .is_some_and(|&target| !is_kept[target])
                {
                    missing.push((i, dependency.clone()));
                }
            }
        }
        missing
    }

    /// The first message of each normal or pinned unit whose first message is
    /// tagged a constraint (the candidates for anchoring), in order.
    pub fn constraint_starts(&self) -> Vec<usize> {
        self.units
            .iter()
            .filter(|u| matches!(u.kind, UnitKind::Normal | UnitKind::Pinned))
            .filter(|u| self.messages[u.start].tags & tags::CONSTRAINT != 0)
            .map(|u| u.start)
            .collect()
    }
}

/// An inline dependency in an assistant's text: `depends_on=ID`,
/// `Depends on: ID`, `DEPENDS_ON "ID"`.
static DEPENDS_ON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:depends|Depends|DEPENDS)[_ ](?:on|On|ON) *[=:] *["']?([A-Za-z0-9_.\-]+)"#)
        .expect("a valid pattern")
});

/// Whether `text` may hold a [`DEPENDS_ON`] match: two SIMD substring
/// searches cost half of what the regex's own prefilter does, on the
/// assistant text of every turn.
fn mentions_depends_on(text: &str) -> bool {
    static LOWER: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new("epends"));
    static UPPER: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new("EPENDS"));
    LOWER.find(text.as_bytes()).is_some() || UPPER.find(text.as_bytes()).is_some()
}

/// Read every message; `cap` limits each tool result's tokens. Without a
/// `tagger` only the tags the caller gave are read (a policy that does not
/// weigh tags skips finding them).
pub fn analyze<J: JsonValue>(
    messages: &[J],
    tokenizer: &Tokenizer,
    tagger: Option<&Tagger>,
    cap: Option<usize>,
) -> Result<Analysis> {
    let mut infos = Vec::with_capacity(messages.len());
    let mut truncations = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let info = read(index, message, tokenizer, tagger, cap, &mut truncations)
            .map_err(|e| e.within(&format!("messages[{index}]")))?;
        infos.push(info);
    }
    Ok(assemble(infos, truncations))
}

/// What [`analyze`] reads of one message, on its own: its facts and its
/// capped tool results (`message` 0 in each). A caller that has read a
/// message before may keep this and hand it to [`assemble`] again.
pub fn read_message<J: JsonValue>(
    message: &J,
    tokenizer: &Tokenizer,
    tagger: Option<&Tagger>,
    cap: Option<usize>,
) -> Result<(MessageInfo, Vec<Truncation>)> {
    let mut truncations = Vec::new();
    let info = read(0, message, tokenizer, tagger, cap, &mut truncations)?;
    Ok((info, truncations))
}

/// The analysis of messages read one by one (their truncations carrying
/// their message numbers, in order): the units grouped over them.
pub fn assemble(messages: Vec<MessageInfo>, truncations: Vec<Truncation>) -> Analysis {
    let units = units(&messages);
    Analysis {
        messages,
        units,
        truncations,
    }
}

/// What selection reads of one message (tool results uncapped): the facts
/// the message log stores in a node's header at append.
pub fn analyze_message<J: JsonValue>(
    message: &J,
    tokenizer: &Tokenizer,
    tagger: Option<&Tagger>,
) -> Result<MessageInfo> {
    read(0, message, tokenizer, tagger, None, &mut Vec::new())
}

fn read<J: JsonValue>(
    index: usize,
    message: &J,
    tokenizer: &Tokenizer,
    tagger: Option<&Tagger>,
    cap: Option<usize>,
    truncations: &mut Vec<Truncation>,
) -> Result<MessageInfo> {
    if message.kind() != Kind::Object {
        return Err(wrong_type("", "a message dict", message));
    }
    let (chat, fields, has_metadata) = read_fields(message);
    let role = match chat.role.as_ref().and_then(JsonValue::as_str).as_deref() {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool" | "function") => Role::Tool,
        _ => Role::Other,
    };
    let calls = chat
        .tool_calls
        .as_ref()
        .is_some_and(|c| c.kind() == Kind::Array && c.len() > 0);
    // A string content is keyed once: its count and its tags are cached under the same key.
    // (Without caches, as a log's appends count, the key would go unused.)
    let caching = tokenizer.caches() || tagger.is_some_and(Tagger::caches);
    let content_key = chat
        .content
        .as_ref()
        .filter(|_| caching)
        .filter(|c| {
            c.as_str()
                .is_some_and(|text| text.len() >= MIN_CACHED_BYTES)
        })
        .and_then(JsonValue::text_key);
    let tokens = tokenizer.count_fields_keyed(&chat, content_key)?;
    let given_tags = read_tags(fields.tags.as_ref())?;
    let meta = read_metadata(&fields)?;
    let mut facts = ContentFacts {
        calls,
        results: role == Role::Tool,
        thinking: false,
        has_text: false,
        tokens,
        found_tags: 0,
        depends_on: meta.depends_on,
        error: None,
    };
    let reader = ContentReader {
        index,
        role,
        tokenizer,
        tagger: tagger.filter(|_| given_tags.is_none()),
        cap,
    };
    if let Some(content) = chat.content.as_ref().filter(|c| c.kind() != Kind::Null) {
        reader.read(content, content_key, &mut facts, truncations);
    }
    if let Some(error) = facts.error.take() {
        return Err(error);
    }
    let tags = given_tags.unwrap_or(facts.found_tags | if facts.thinking { EVIDENCE } else { 0 });
    Ok(MessageInfo {
        role,
        tokens: facts.tokens,
        tags,
        pinned: meta.pinned,
        priority: meta.priority,
        weight: meta.weight,
        timestamp: meta.timestamp,
        id: meta.id,
        depends_on: facts.depends_on,
        calls: facts.calls,
        results: facts.results,
        has_text: facts.has_text,
        has_metadata,
    })
}

/// What the content of a message says to selection.
#[allow(clippy::struct_excessive_bools)]
struct ContentFacts {
    calls: bool,
    results: bool,
    thinking: bool,
    has_text: bool,
    tokens: usize,
    found_tags: u8,
    depends_on: Vec<String>,
    /// A tool result that could not be capped (the marker alone is over the cap).
    error: Option<Error>,
}

/// Reads one message's content: caps tool results, finds tags and inline
/// `depends_on=ID` references.
struct ContentReader<'a> {
    index: usize,
    role: Role,
    tokenizer: &'a Tokenizer,
    /// `None` when the caller gave the tags.
    tagger: Option<&'a Tagger>,
    cap: Option<usize>,
}

impl ContentReader<'_> {
    fn read<J: JsonValue>(
        &self,
        content: &J,
        content_key: Option<u128>,
        facts: &mut ContentFacts,
        truncations: &mut Vec<Truncation>,
    ) {
        if let Some(s) = content.as_str() {
            facts.has_text = !s.trim().is_empty();
            if self.role == Role::Tool
                && let Some(t) = cap_text(self.tokenizer, &s, content_key, self.cap, facts)
            {
                facts.tokens = facts.tokens + t.after - t.before;
                truncations.push(Truncation {
                    message: self.index,
                    ..t
                });
            }
            self.note_own_text(&s, content_key, facts);
            return;
        }
        if content.kind() != Kind::Array {
            return;
        }
        let mut own = String::new();
        for (j, block) in content.items().enumerate() {
            let kind = block.get("type");
            match kind.as_ref().and_then(JsonValue::as_str).as_deref() {
                Some(name @ ("text" | "input_text" | "output_text")) => {
                    if let Some(t) = block.get("text").as_ref().and_then(JsonValue::as_str) {
                        facts.has_text |= !t.trim().is_empty();
                        own.push_str(&t);
                        own.push('\n');
                        // An OpenAI tool message's output in parts: each
                        // text capped, as a `tool_result`'s are.
                        if self.role == Role::Tool && name == "text" {
                            self.cap_part(j, &t, facts, truncations);
                        }
                    }
                }
                Some("thinking" | "redacted_thinking") => facts.thinking = true,
                Some("tool_use") => facts.calls = true,
                Some("tool_result") => {
                    self.read_result(j, &block, facts, truncations);
                }
                _ => {}
            }
        }
        self.note_own_text(&own, None, facts);
    }

    /// Text part `j` of a tool message's content, capped (not cached by
    /// its key: a part is a slice of the message's own text).
    fn cap_part(
        &self,
        j: usize,
        text: &str,
        facts: &mut ContentFacts,
        truncations: &mut Vec<Truncation>,
    ) {
        if let Some(t) = cap_text(self.tokenizer, text, None, self.cap, facts) {
            facts.tokens = facts.tokens + t.after - t.before;
            truncations.push(Truncation {
                message: self.index,
                block: None,
                part: Some(j),
                ..t
            });
        }
    }

    /// A `tool_result` block: each of its texts capped and tagged (a tool's
    /// output states no rules and asks nothing: it can only be a log).
    fn read_result<J: JsonValue>(
        &self,
        j: usize,
        block: &J,
        facts: &mut ContentFacts,
        truncations: &mut Vec<Truncation>,
    ) {
        facts.results = true;
        let Some(content) = block.get("content") else {
            return;
        };
        let mut read_text = |value: &J, part: Option<usize>| {
            let Some(text) = value.as_str() else { return };
            let key = value.text_key().filter(|_| text.len() >= MIN_CACHED_BYTES);
            if let Some(tagger) = self.tagger {
                facts.found_tags |= tagger.tag_wanted(&text, key, tags::LOG);
            }
            if let Some(t) = cap_text(self.tokenizer, &text, key, self.cap, facts) {
                facts.tokens = facts.tokens + t.after - t.before;
                truncations.push(Truncation {
                    message: self.index,
                    block: Some(j),
                    part,
                    ..t
                });
            }
        };
        if content.as_str().is_some() {
            read_text(&content, None);
        } else if content.kind() == Kind::Array {
            for (k, part) in content.items().enumerate() {
                let is_text = part
                    .get("type")
                    .is_some_and(|t| t.as_str().as_deref() == Some("text"));
                if let Some(text) = part.get("text").filter(|_| is_text) {
                    read_text(&text, Some(k));
                }
            }
        }
    }

    /// Tags found in the message's own text count where they mean something:
    /// rules come from users and system prompts, reasoning from the
    /// assistant, tasks from users.
    fn note_own_text(&self, text: &str, key: Option<u128>, facts: &mut ContentFacts) {
        if text.is_empty() {
            return;
        }
        if let Some(tagger) = self.tagger {
            let allowed = match self.role {
                Role::System => tags::CONSTRAINT | tags::LOG,
                Role::User => tags::CONSTRAINT | tags::PULSE | tags::LOG,
                Role::Assistant => tags::EVIDENCE | tags::LOG,
                Role::Tool | Role::Other => tags::LOG,
            };
            facts.found_tags |= tagger.tag_wanted(text, key, allowed);
        }
        if self.role == Role::Assistant && mentions_depends_on(text) {
            for found in DEPENDS_ON.captures_iter(text) {
                facts.depends_on.push(found[1].to_owned());
            }
        }
    }
}

/// Selection metadata of a message (`pinned`, `priority`, `weight`,
/// `timestamp`, `id`, `depends_on`).
struct Metadata {
    pinned: bool,
    priority: f64,
    weight: Option<f64>,
    timestamp: Option<f64>,
    id: Option<String>,
    depends_on: Vec<String>,
}

/// Selection metadata values of a message; `None` stands for absent or `None`.
struct Fields<J> {
    pinned: Option<J>,
    priority: Option<J>,
    weight: Option<J>,
    tags: Option<J>,
    timestamp: Option<J>,
    id: Option<J>,
    depends_on: Option<J>,
}

/// A message's counted fields and its metadata, in one pass over its keys,
/// and whether any metadata key is there at all.
fn read_fields<J: JsonValue>(message: &J) -> (MessageFields<J>, Fields<J>, bool) {
    let [
        role,
        name,
        content,
        refusal,
        tool_calls,
        function_call,
        pinned,
        priority,
        weight,
        tags,
        timestamp,
        id,
        depends_on,
    ] = message.pick(&[
        "role",
        "name",
        "content",
        "refusal",
        "tool_calls",
        "function_call",
        "pinned",
        "priority",
        "weight",
        "tags",
        "timestamp",
        "id",
        "depends_on",
    ]);
    let has_metadata = [
        &pinned,
        &priority,
        &weight,
        &tags,
        &timestamp,
        &id,
        &depends_on,
    ]
    .iter()
    .any(|v| v.is_some());
    let present = |v: Option<J>| v.filter(|v| v.kind() != Kind::Null);
    let chat = MessageFields::from([role, name, content, refusal, tool_calls, function_call]);
    let metadata = Fields {
        pinned: present(pinned),
        priority: present(priority),
        weight: present(weight),
        tags: present(tags),
        timestamp: present(timestamp),
        id: present(id),
        depends_on: present(depends_on),
    };
    (chat, metadata, has_metadata)
}

fn read_metadata<J: JsonValue>(fields: &Fields<J>) -> Result<Metadata> {
    let number = |key: &'static str, value: Option<&J>| -> Result<Option<f64>> {
        match value {
            None => Ok(None),
            Some(v) if v.kind() == Kind::Number => match v.as_f64() {
                Ok(number) => Ok(Some(number)),
                Err(Error::WrongType { .. }) => Err(wrong_type(key, "a finite number", v)),
                Err(other) => Err(other),
            },
            Some(v) => Err(wrong_type(key, "a number", v)),
        }
    };
    let pinned = match &fields.pinned {
        None => false,
        Some(v) => match v.kind() {
            Kind::Bool(b) => b,
            _ => return Err(wrong_type("pinned", "bool", v)),
        },
    };
    let id = match &fields.id {
        Some(v) => Some(
            v.as_str()
                .map(std::borrow::Cow::into_owned)
                .ok_or_else(|| wrong_type("id", "str", v))?,
        ),
        None => None,
    };
    let mut depends_on = Vec::new();
    match &fields.depends_on {
        None => {}
        Some(v) if v.kind() == Kind::String => {
            depends_on.push(v.as_str().unwrap_or_default().into_owned());
        }
        Some(v) if v.kind() == Kind::Array => {
            for (i, d) in v.items().enumerate() {
                depends_on.push(
                    d.as_str()
                        .map(std::borrow::Cow::into_owned)
                        .ok_or_else(|| wrong_type(&format!("depends_on[{i}]"), "str", &d))?,
                );
            }
        }
        Some(v) => {
            return Err(wrong_type(
                "depends_on",
                "a message id or a list of them",
                v,
            ));
        }
    }
    Ok(Metadata {
        pinned,
        priority: number("priority", fields.priority.as_ref())?.unwrap_or(0.0),
        weight: finite_weight(number("weight", fields.weight.as_ref())?)?,
        timestamp: number("timestamp", fields.timestamp.as_ref())?,
        id,
        depends_on,
    })
}

/// A message's `weight`, refused where it is not finite (NaN, an infinity,
/// an int past a float's range), as the log refuses it: NaN has no place
/// in the window's order, and an infinite weight is no weight. A log's
/// append reads the message through here too, so no log takes a message
/// (even one whose weight a keyword overrides) that a list's policy would
/// then refuse.
fn finite_weight(weight: Option<f64>) -> Result<Option<f64>> {
    match weight {
        Some(value) if !value.is_finite() => Err(Error::InvalidValue {
            path: "weight".into(),
            reason: format!("must be a finite number, not {value}"),
        }),
        _ => Ok(weight),
    }
}

/// Tags the caller gave (`tags`), as a mask.
fn read_tags<J: JsonValue>(tags: Option<&J>) -> Result<Option<u8>> {
    Ok(match tags {
        None => None,
        Some(t) if t.kind() == Kind::Array => {
            let mut names = Vec::new();
            for (i, name) in t.items().enumerate() {
                names.push(
                    name.as_str()
                        .map(std::borrow::Cow::into_owned)
                        .ok_or_else(|| wrong_type(&format!("tags[{i}]"), "str", &name))?,
                );
            }
            Some(tags::mask_of(names.iter().map(String::as_str))?)
        }
        Some(other) => return Err(wrong_type("tags", "a list of tag names", other)),
    })
}

/// The capped forms of tool results, computed once per (text, cap,
/// encoding) and reused every turn after: a history is reread each turn,
/// and cutting a 50 KB result anew would cost more than the rest of the
/// turn. Keyed by the text's cache key (see [`crate::text_key`]); bounded
/// by the bytes held.
struct CutCache {
    map: quick_cache::sync::Cache<CutKey, Arc<Cut>, CutWeighter>,
}

type CutKey = (u128, usize, crate::Encoding);

/// A tool result as capped: its text, and its tokens before and after.
struct Cut {
    text: Arc<str>,
    before: usize,
    after: usize,
}

#[derive(Clone)]
struct CutWeighter;

impl quick_cache::Weighter<CutKey, Arc<Cut>> for CutWeighter {
    fn weight(&self, _key: &CutKey, cut: &Arc<Cut>) -> u64 {
        cut.text.len() as u64 + 64
    }
}

/// Bytes of capped texts kept: a few thousand results at the default cap.
const CUT_CACHE_BYTES: u64 = 32 << 20;

static CUTS: LazyLock<CutCache> = LazyLock::new(|| CutCache {
    map: quick_cache::sync::Cache::with_weighter(4096, CUT_CACHE_BYTES, CutWeighter),
});

/// The capped form of a tool result text, if it is over the cap; a cap too
/// small for the marker is noted in `facts` (the message is refused).
fn cap_text(
    tokenizer: &Tokenizer,
    text: &str,
    key: Option<u128>,
    cap: Option<usize>,
    facts: &mut ContentFacts,
) -> Option<Truncation> {
    let cap = cap?;
    // A token is at least one byte, so a short text is under the cap; a
    // longer one is counted through the cache (each turn sees it again).
    if text.len() <= cap {
        return None;
    }
    let before = match key {
        Some(key) => tokenizer.count_keyed(text, key),
        None => tokenizer.count_cached(text),
    };
    if before <= cap {
        return None;
    }
    let mut cut_now = || -> Option<Arc<Cut>> {
        let (cut, counted) =
            match tokenizer.truncate_with_count(text, cap, Some(TRUNCATION_MARKER), || before) {
                Ok(found) => found,
                Err(error) => {
                    // Named with the message it is in (as a path error is).
                    facts.error.get_or_insert(Error::InvalidValue {
                        path: String::new(),
                        reason: error.to_string(),
                    });
                    return None;
                }
            };
        // The cut's count is the truncation's last check (a text that fits
        // is its own cut); left in the cache, counting the request that
        // carries the cut is a lookup too.
        let after = counted.unwrap_or(before);
        tokenizer.remember_count(&cut, after);
        Some(Arc::new(Cut {
            text: Arc::from(cut.as_ref()),
            before,
            after,
        }))
    };
    let cut = match key.filter(|_| tokenizer.caches()) {
        Some(key) => {
            let slot = (key, cap, tokenizer.encoding());
            if let Some(cut) = CUTS.map.get(&slot) {
                cut
            } else {
                let cut = cut_now()?;
                CUTS.map.insert(slot, Arc::clone(&cut));
                cut
            }
        }
        None => cut_now()?,
    };
    Some(Truncation {
        message: 0,
        block: None,
        part: None,
        text: Arc::clone(&cut.text),
        before: cut.before,
        after: cut.after,
    })
}

/// Group messages into units: an assistant message with tool calls takes the
/// results that answer it (OpenAI: the tool messages after it; Anthropic: the
/// next message if it holds tool results).
/// What grouping into units needs of one message.
#[derive(Clone, Copy, Debug)]
#[allow(clippy::struct_excessive_bools)]
pub struct UnitFacts {
    /// A weight known while grouping (a log's headers give it); NaN if none.
    pub weight: f64,
    pub role: Role,
    pub tokens: usize,
    pub tags: u8,
    pub pinned: bool,
    pub calls: bool,
    pub results: bool,
    pub has_text: bool,
}

impl UnitFacts {
    /// A placeholder, for a buffer about to be filled.
    pub const EMPTY: Self = Self {
        weight: f64::NAN,
        role: Role::Other,
        tokens: 0,
        tags: 0,
        pinned: false,
        calls: false,
        results: false,
        has_text: false,
    };
}

impl MessageInfo {
    pub fn unit_facts(&self) -> UnitFacts {
        UnitFacts {
            weight: f64::NAN,
            role: self.role,
            tokens: self.tokens,
            tags: self.tags,
            pinned: self.pinned,
            calls: self.calls,
            results: self.results,
            has_text: self.has_text,
        }
    }
}

fn units(messages: &[MessageInfo]) -> Vec<Unit> {
    group_units(messages.len(), |i| messages[i].unit_facts())
}

/// Group `count` messages (read through `facts`) into units: an assistant
/// message with tool calls takes the results that answer it.
pub fn group_units(count: usize, facts: impl Fn(usize) -> UnitFacts) -> Vec<Unit> {
    let mut units = Vec::with_capacity(count);
    for_each_unit(count, facts, |unit| units.push(unit));
    units
}

/// The units of `count` messages handed to `emit` in order, without keeping
/// them (a million-message log need not hold a million units).
///
/// The turn in progress (the newest unit that starts a turn, and every unit
/// after it: the tool calls and results of the loop the model is in) is held
/// back until the end and its normal units are marked [`UnitKind::Current`]:
/// every policy keeps it, as it keeps system and pinned messages. A view
/// with no unit that starts a turn (a summary covers the input the loop
/// began with) holds back the call it ends in, with its results, instead:
/// the step the model is in, which was dropped like history. (The newest
/// call alone: a run of them would grow as the units between were left
/// out, and a log's window, laid out from what it kept, would count more
/// as in progress than the same policy over the list.)
pub fn for_each_unit(count: usize, facts: impl Fn(usize) -> UnitFacts, mut emit: impl FnMut(Unit)) {
    for_each_unit_from(0, count, facts, |unit, _| emit(unit));
}

/// [`for_each_unit`] over messages `first..count` only, each unit handed
/// on with whether it is the turn in progress's (held back to the end).
/// The units before the turn in progress never change as messages are
/// appended (the message that starts it ends the unit before), so from a
/// message that starts a turn the units are those of the whole pass.
pub fn for_each_unit_from(
    first: usize,
    count: usize,
    facts: impl Fn(usize) -> UnitFacts,
    mut emit: impl FnMut(Unit, bool),
) {
    let mut in_progress: Vec<Unit> = Vec::new();
    // The newest unit, if it is a call (with its results) and no unit
    // before it starts a turn: the step the model is in, if the view ends in it.
    let mut looping: Option<Unit> = None;
    let mut i = first;
    while i < count {
        let m = facts(i);
        let mut end = i + 1;
        let (mut tokens, mut tags, mut pinned, mut weight) = (m.tokens, m.tags, m.pinned, m.weight);
        if m.role == Role::Assistant && m.calls {
            while end < count {
                let next = facts(end);
                if !(next.results && matches!(next.role, Role::Tool | Role::User)) {
                    break;
                }
                end += 1;
                tokens += next.tokens;
                tags |= next.tags;
                pinned |= next.pinned;
                weight = weight.max(next.weight);
                if next.role == Role::User {
                    break; // one user message holds all of them
                }
            }
        }
        let kind = if m.role == Role::System {
            UnitKind::System
        } else if pinned {
            UnitKind::Pinned
        } else {
            UnitKind::Normal
        };
        let unit = Unit {
            start: i,
            end,
            tokens,
            kind,
            tags,
            turn_start: m.role == Role::User && m.has_text && !m.results,
            weight,
        };
        // A newer unit: the call held back is history now.
        if let Some(call) = looping.take() {
            emit(call, false);
        }
        if unit.turn_start {
            // A newer turn begins: the one held back is history now.
            in_progress.drain(..).for_each(|unit| emit(unit, false));
        }
        if unit.turn_start || !in_progress.is_empty() {
            in_progress.push(unit);
        } else if m.role == Role::Assistant && m.calls {
            looping = Some(unit);
        } else {
            emit(unit, false); // before the first turn: never in progress
        }
        i = end;
    }
    if in_progress.is_empty() {
        in_progress.extend(looping);
    }
    for mut unit in in_progress {
        if unit.kind == UnitKind::Normal {
            unit.kind = UnitKind::Current;
        }
        emit(unit, true);
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::analyze;
    use crate::encoding::Encoding;
    use crate::json::Json;
    use crate::tokenizer::Tokenizer;

    fn message(weight: &'static str) -> Json<'static> {
        let text = |s: &'static str| Json::String(Cow::Borrowed(s));
        Json::Object(vec![
            (text("role"), text("user")),
            (text("content"), text("hi")),
            (text("weight"), Json::Number(Cow::Borrowed(weight))),
        ])
    }

    #[test]
    fn a_weight_that_is_not_finite_is_refused_naming_its_message() {
        let tokenizer = Tokenizer::new(Encoding::O200kBase);
        let fine = message("2.5");
        for (literal, shown) in [
            ("NaN", "NaN"),
            ("Infinity", "inf"),
            ("-Infinity", "-inf"),
            ("1e400", "inf"),
        ] {
            let bad = message(literal);
            let error = analyze(&[&fine, &bad], &tokenizer, None, None).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("messages[1].weight: must be a finite number, not {shown}")
            );
        }
        let read = analyze(&[&fine, &message("-1e300")], &tokenizer, None, None).unwrap();
        assert_eq!(read.messages[0].weight, Some(2.5));
        assert_eq!(read.messages[1].weight, Some(-1e300));
    }
}
