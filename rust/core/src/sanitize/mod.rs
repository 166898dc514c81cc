//! The sanitize funnel: repairs a chat history so the OpenAI Chat Completions
//! or the Anthropic Messages API accepts it.
//!
//! 1. drop what the target API does not take, junk text and empty messages;
//! 2. merge consecutive messages of the same role;
//! 3. pair every tool call with exactly one result where the API wants it;
//! 4. merge again, then the provider's remaining rules.
//!
//! The funnel reads the caller's messages through [`JsonValue`] and answers
//! with a [`Plan`] of references into them, so a valid history costs one read
//! and no copy, and a repaired one reuses every object it keeps.

mod gather;
mod joints;
mod patterns;
mod plan;
mod stages;

pub use gather::is_blank_text_part;
pub use joints::{Joint, called_ids, joint};
pub use patterns::{
    DEFAULT_ERROR_PATTERNS, DEFAULT_MAX_PATTERN_CHARS, DEFAULT_PLACEHOLDER_PATTERNS, Patterns,
};
pub use plan::{
    BlockRef, BuiltMessage, CallRef, Change, OutContent, OutMessage, Plan, TEXT_SEPARATOR,
    legacy_call_id,
};

use gather::{Item, Role};
use stages::{Run, calls_out, content_out};

use crate::error::{Error, Result};
use crate::json::JsonValue;

/// The API the history is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI Chat Completions (and compatible servers).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            _ => Err(Error::InvalidValue {
                path: "provider".to_owned(),
                reason: format!("expected \"openai\" or \"anthropic\", got {name:?}"),
            }),
        }
    }
}

/// What to do with a malformed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInvalid {
    /// Refuse the history, naming the message and the field.
    Raise,
    /// Drop the message and report it.
    Drop,
}

/// Text of the user message inserted when an Anthropic history would start
/// with an assistant turn.
pub const DEFAULT_FIRST_USER_TEXT: &str = "(continued)";

#[derive(Clone, Debug)]
pub struct Options {
    pub provider: Provider,
    /// OpenAI: turn legacy `function_call` / `function` messages into
    /// `tool_calls` / `tool` messages instead of dropping them.
    pub convert_function: bool,
    pub on_invalid: OnInvalid,
    pub first_user_text: String,
}

impl Options {
    pub fn new(provider: Provider) -> Self {
        Self {
            provider,
            convert_function: false,
            on_invalid: OnInvalid::Raise,
            first_user_text: DEFAULT_FIRST_USER_TEXT.to_owned(),
        }
    }
}

/// A configured funnel (patterns compiled once, reused for every history).
pub struct Sanitizer {
    options: Options,
    patterns: Patterns,
}

impl Sanitizer {
    /// A funnel; refuses a `first_user_text` that the funnel itself would
    /// drop (blank or junk), which would make it undo its own repair.
    pub fn new(options: Options, patterns: Patterns) -> Result<Self> {
        let first = &options.first_user_text;
        if patterns::is_blank(first) || patterns.classify(first).is_some() {
            return Err(Error::InvalidValue {
                path: "first_user_text".to_owned(),
                reason: format!("{first:?} is blank or junk text, which sanitize itself drops"),
            });
        }
        Ok(Self { options, patterns })
    }

    /// The funnel with the default patterns.
    pub fn with_defaults(options: Options) -> Result<Self> {
        let patterns = Patterns::new(
            DEFAULT_PLACEHOLDER_PATTERNS,
            DEFAULT_ERROR_PATTERNS,
            DEFAULT_MAX_PATTERN_CHARS,
        )
        .expect("the default patterns compile");
        Self::new(options, patterns)
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Repair `messages`; the plan says what to send and what changed.
    pub fn sanitize<J: JsonValue>(&self, messages: &[J]) -> Result<Plan> {
        self.sanitize_after(messages, &[])
    }

    /// Repair `messages`, the rest of a history whose earlier part kept the
    /// tool calls `called` (their ids): a call here reusing one of them is
    /// a duplicate, as in the whole history (see `joints`).
    pub fn sanitize_after<J: JsonValue>(&self, messages: &[J], called: &[String]) -> Result<Plan> {
        let mut ids = gather::Ids::default();
        let called_before = called.iter().map(|id| ids.key(id)).collect();
        let mut run = Run {
            messages,
            options: &self.options,
            patterns: &self.patterns,
            changes: Vec::new(),
            system: Vec::new(),
            ids,
            called_before,
        };
        let items = run.stage1()?;
        let items = run.merge(2, items);
        let items = run.stage3(items);
        let items = run.merge(4, items);
        let insert_user = self.options.provider == Provider::Anthropic
            && items.first().is_some_and(|first| first.role != Role::User);
        if insert_user {
            run.changes.push(Change {
                stage: 4,
                index: None,
                action: "insert_user",
                reason: "the first message must be a user message".to_owned(),
            });
        }
        let mut out = Vec::with_capacity(items.len() + usize::from(insert_user));
        if insert_user {
            out.push(OutMessage::Built(BuiltMessage {
                base: None,
                role: Some("user"),
                content: Some(OutContent::Literal(self.options.first_user_text.clone())),
                tool_calls: None,
                tool_call_id: None,
                remove: Vec::new(),
            }));
        }
        out.extend(items.iter().map(out_message));
        Ok(Plan {
            messages: out,
            system: run.system,
            changes: run.changes,
        })
    }
}

/// The output form of an item: the input message itself when nothing changed.
fn out_message(item: &Item) -> OutMessage {
    let edited = item.content_changed || item.calls_changed || item.converted_from_function;
    if !edited {
        return OutMessage::Original(item.origin);
    }
    let mut remove = Vec::new();
    if item.has_function_call {
        remove.push("function_call");
    }
    if item.converted_from_function {
        remove.push("name");
    }
    OutMessage::Built(BuiltMessage {
        base: Some(item.origin),
        role: item.converted_from_function.then_some("tool"),
        content: item.content_changed.then(|| content_out(&item.content)),
        tool_calls: item.calls_changed.then(|| calls_out(&item.calls)),
        tool_call_id: item.legacy_of.map(legacy_call_id),
        remove,
    })
}

#[cfg(test)]
mod tests;
