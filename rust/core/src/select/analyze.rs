//! Reading a history for selection: per message its exact token count (tool
//! results capped first), tags and metadata; then the units no policy may
//! split: an assistant tool call with all its results, or a single message.

use std::sync::LazyLock;

use regex::Regex;

use crate::error::{Error, Result};
use crate::json::{JsonValue, Kind};
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
}

/// A tool result cut to the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    pub message: usize,
    /// The `tool_result` block (Anthropic); `None` for an OpenAI tool message.
    pub block: Option<usize>,
    /// The text block inside that `tool_result`'s content list, if it is one.
    pub part: Option<usize>,
    pub text: String,
    pub before: usize,
    pub after: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    /// System or developer messages: always kept, placed first.
    System,
    /// Messages marked `pinned`: always kept.
    Pinned,
    /// The current input (a final user message): always kept.
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
}

fn wrong_type<J: JsonValue>(path: &str, expected: &'static str, found: &J) -> Error {
    Error::WrongType {
        path: path.to_owned(),
        expected,
        found: found.type_name().into_owned(),
    }
}

static DEPENDS_ON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)depends[_ ]on *[=:] *["']?([A-Za-z0-9_.\-]+)"#).expect("a valid pattern")
});

/// Read every message; `cap` limits each tool result's tokens.
pub fn analyze<J: JsonValue>(
    messages: &[J],
    tokenizer: &Tokenizer,
    tagger: &Tagger,
    cap: Option<usize>,
) -> Result<Analysis> {
    let mut infos = Vec::with_capacity(messages.len());
    let mut truncations = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let info = read(index, message, tokenizer, tagger, cap, &mut truncations)
            .map_err(|e| e.within(&format!("messages[{index}]")))?;
        infos.push(info);
    }
    let units = units(&infos);
    Ok(Analysis {
        messages: infos,
        units,
        truncations,
    })
}

fn read<J: JsonValue>(
    index: usize,
    message: &J,
    tokenizer: &Tokenizer,
    tagger: &Tagger,
    cap: Option<usize>,
    truncations: &mut Vec<Truncation>,
) -> Result<MessageInfo> {
    if message.kind() != Kind::Object {
        return Err(wrong_type("", "a message dict", message));
    }
    let tokens = tokenizer.count_message(message)?;
    let role_text = message
        .get("role")
        .and_then(|r| r.as_str().map(std::borrow::Cow::into_owned))
        .unwrap_or_default();
    let role = match role_text.as_str() {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        _ => Role::Other,
    };
    let ContentFacts {
        text,
        calls,
        results,
        thinking,
        has_text,
        tokens,
    } = read_content(index, message, role, tokenizer, cap, tokens, truncations);
    let given_tags = read_tags(message)?;
    let tags = given_tags.unwrap_or_else(|| {
        // Found tags count where they mean something: rules come from users
        // and system prompts, reasoning from the assistant, tasks from users.
        let found = tagger.tag(&text);
        let allowed = match role {
            Role::System => tags::CONSTRAINT | tags::LOG,
            Role::User => tags::CONSTRAINT | tags::PULSE | tags::LOG,
            Role::Assistant => tags::EVIDENCE | tags::LOG,
            Role::Tool | Role::Other => tags::LOG,
        };
        (found & allowed) | if thinking { EVIDENCE } else { 0 }
    });
    let meta = read_metadata(message)?;
    let mut depends_on = meta.depends_on;
    if role == Role::Assistant {
        for found in DEPENDS_ON.captures_iter(&text) {
            depends_on.push(found[1].to_owned());
        }
    }
    Ok(MessageInfo {
        role,
        tokens,
        tags,
        pinned: meta.pinned,
        priority: meta.priority,
        weight: meta.weight,
        timestamp: meta.timestamp,
        id: meta.id,
        depends_on,
        calls,
        results,
        has_text,
    })
}

/// What the content of a message says to selection.
#[allow(clippy::struct_excessive_bools)]
struct ContentFacts {
    text: String,
    calls: bool,
    results: bool,
    thinking: bool,
    has_text: bool,
    tokens: usize,
}

fn read_content<J: JsonValue>(
    index: usize,
    message: &J,
    role: Role,
    tokenizer: &Tokenizer,
    cap: Option<usize>,
    mut tokens: usize,
    truncations: &mut Vec<Truncation>,
) -> ContentFacts {
    let mut text = String::new();
    let mut calls = message
        .get("tool_calls")
        .is_some_and(|c| c.kind() == Kind::Array && c.len() > 0);
    let mut results = role == Role::Tool;
    let mut thinking = false;
    let mut has_text = false;
    if let Some(content) = message.get("content") {
        if let Some(s) = content.as_str() {
            has_text = !s.trim().is_empty();
            text.push_str(&s);
            if role == Role::Tool {
                if let Some(t) = cap_text(tokenizer, &s, cap) {
                    tokens = tokens + t.after - t.before;
                    truncations.push(Truncation {
                        message: index,
                        ..t
                    });
                }
            }
        } else if content.kind() == Kind::Array {
            for (j, block) in content.items().enumerate() {
                let kind = block
                    .get("type")
                    .and_then(|t| t.as_str().map(std::borrow::Cow::into_owned));
                match kind.as_deref() {
                    Some("text" | "input_text" | "output_text") => {
                        if let Some(t) = block
                            .get("text")
                            .and_then(|t| t.as_str().map(std::borrow::Cow::into_owned))
                        {
                            has_text |= !t.trim().is_empty();
                            text.push_str(&t);
                            text.push('\n');
                        }
                    }
                    Some("thinking" | "redacted_thinking") => thinking = true,
                    Some("tool_use") => calls = true,
                    Some("tool_result") => {
                        results = true;
                        tokens = cap_result(
                            index,
                            j,
                            &block,
                            tokenizer,
                            cap,
                            tokens,
                            truncations,
                            &mut text,
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    ContentFacts {
        text,
        calls,
        results,
        thinking,
        has_text,
        tokens,
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

fn read_metadata<J: JsonValue>(message: &J) -> Result<Metadata> {
    let number = |key: &'static str| -> Result<Option<f64>> {
        match message.get(key) {
            None => Ok(None),
            Some(v) if v.kind() == Kind::Null => Ok(None),
            Some(v) if v.kind() == Kind::Number => v
                .number_literal()?
                .parse::<f64>()
                .map(Some)
                .map_err(|_| wrong_type(key, "a finite number", &v)),
            Some(v) => Err(wrong_type(key, "a number", &v)),
        }
    };
    let pinned = match message.get("pinned") {
        None => false,
        Some(v) => match v.kind() {
            Kind::Bool(b) => b,
            Kind::Null => false,
            _ => return Err(wrong_type("pinned", "bool", &v)),
        },
    };
    let id = match message.get("id") {
        Some(v) if v.kind() != Kind::Null => Some(
            v.as_str()
                .map(std::borrow::Cow::into_owned)
                .ok_or_else(|| wrong_type("id", "str", &v))?,
        ),
        _ => None,
    };
    let mut depends_on = Vec::new();
    match message.get("depends_on") {
        None => {}
        Some(v) if v.kind() == Kind::Null => {}
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
                &v,
            ));
        }
    }
    Ok(Metadata {
        pinned,
        priority: number("priority")?.unwrap_or(0.0),
        weight: number("weight")?,
        timestamp: number("timestamp")?,
        id,
        depends_on,
    })
}

/// Tags the caller gave (`tags`), as a mask.
fn read_tags<J: JsonValue>(message: &J) -> Result<Option<u8>> {
    Ok(match message.get("tags") {
        None => None,
        Some(t) if t.kind() == Kind::Null => None,
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
        Some(other) => return Err(wrong_type("tags", "a list of tag names", &other)),
    })
}

/// Cap an Anthropic `tool_result` block: its string content, or each text
/// block of its content list. Returns the message's new token count.
#[allow(clippy::too_many_arguments)]
fn cap_result<J: JsonValue>(
    index: usize,
    j: usize,
    block: &J,
    tokenizer: &Tokenizer,
    cap: Option<usize>,
    mut tokens: usize,
    truncations: &mut Vec<Truncation>,
    text: &mut String,
) -> usize {
    let Some(content) = block.get("content") else {
        return tokens;
    };
    if let Some(s) = content.as_str() {
        text.push_str(&s);
        text.push('\n');
        if let Some(t) = cap_text(tokenizer, &s, cap) {
            tokens = tokens + t.after - t.before;
            truncations.push(Truncation {
                message: index,
                block: Some(j),
                ..t
            });
        }
    } else if content.kind() == Kind::Array {
        for (k, part) in content.items().enumerate() {
            let is_text = part
                .get("type")
                .is_some_and(|t| t.as_str().as_deref() == Some("text"));
            let Some(s) = part
                .get("text")
                .filter(|_| is_text)
                .and_then(|t| t.as_str().map(std::borrow::Cow::into_owned))
            else {
                continue;
            };
            text.push_str(&s);
            text.push('\n');
            if let Some(t) = cap_text(tokenizer, &s, cap) {
                tokens = tokens + t.after - t.before;
                truncations.push(Truncation {
                    message: index,
                    block: Some(j),
                    part: Some(k),
                    ..t
                });
            }
        }
    }
    tokens
}

/// The capped form of a tool result text, if it is over the cap.
fn cap_text(tokenizer: &Tokenizer, text: &str, cap: Option<usize>) -> Option<Truncation> {
    let cap = cap?;
    if tokenizer.count_up_to(text, cap) <= cap {
        return None;
    }
    let before = tokenizer.count_cached(text);
    let cut = tokenizer
        .truncate(text, cap, Some(TRUNCATION_MARKER))
        .ok()?;
    let after = tokenizer.count_cached(&cut);
    Some(Truncation {
        message: 0,
        block: None,
        part: None,
        text: cut.into_owned(),
        before,
        after,
    })
}

/// Group messages into units: an assistant message with tool calls takes the
/// results that answer it (OpenAI: the tool messages after it; Anthropic: the
/// next message if it holds tool results).
fn units(messages: &[MessageInfo]) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        let mut end = i + 1;
        if m.role == Role::Assistant && m.calls {
            while end < messages.len()
                && messages[end].results
                && matches!(messages[end].role, Role::Tool | Role::User)
            {
                let anthropic_results = messages[end].role == Role::User;
                end += 1;
                if anthropic_results {
                    break; // one user message holds all of them
                }
            }
        }
        let members = &messages[i..end];
        let kind = if m.role == Role::System {
            UnitKind::System
        } else if members.iter().any(|x| x.pinned) {
            UnitKind::Pinned
        } else {
            UnitKind::Normal
        };
        units.push(Unit {
            start: i,
            end,
            tokens: members.iter().map(|x| x.tokens).sum(),
            kind,
            tags: members.iter().fold(0, |acc, x| acc | x.tags),
            turn_start: m.role == Role::User && m.has_text && !m.results,
        });
        i = end;
    }
    // The current input: a final user turn.
    if let Some(last) = units.last_mut() {
        if last.turn_start && last.kind == UnitKind::Normal {
            last.kind = UnitKind::Current;
        }
    }
    units
}
