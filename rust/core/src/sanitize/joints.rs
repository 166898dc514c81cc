//! Where a history the funnel has answered can be extended without running
//! the funnel over all of it again.
//!
//! Take a history `P` and the funnel's answer for it, and `P + S` with new
//! messages `S`. Let `c > 0` be a message of `P` that starts a turn (a user
//! message with text of its own and no tool results: the binding takes the
//! last). If every change of the answer for `P` concerns a message before
//! `c` (or is the inserted first user message), no tool-call id of
//! `P[c..] + S` occurs in `P[..c]`, and `P[c..] + S` holds no system or
//! developer message, then the answer for `P + S` is the answer for `P` up
//! to `P[c]`, then the answer for `P[c..] + S` alone (its messages renumbered
//! from `c`):
//!
//! - stage 1 judges each message alone: the same for both;
//! - no merge reaches across `c`: `P[c]` was not merged into what came
//!   before it (that would be a change at `c`), and merging looks only at
//!   the two neighbours, which are the same;
//! - no pairing reaches across `c`: results are paired with calls by their
//!   ids (duplicates, orphans and moves too), and no id is on both sides;
//! - the first-message rule holds for the tail (`P[c]` is a user message),
//!   and with no system message after `c` nothing there is lifted out.
//!
//! The stages report their changes in order, stage by stage, so the
//! answer's changes are, per stage, those before `c` then the tail's, and
//! the inserted first user message last.
//!
//! Once the answer is known to split at `c` this way, it splits at `c` for
//! every later extension whose tail meets the same conditions (no id of the
//! tail before `c`, no system message in it), whatever the tail's own
//! changes: the part before `c` and its neighbours are the same messages,
//! and the tail is judged alone. The tail's answer may even change `P[c]`
//! (a later user message merged into it); only a change reported at `c`
//! itself, or a refusal (whose reason names an index), is left to the whole
//! funnel.
//!
//! One id may reach back: a tool call that reuses an id the part before `c`
//! used. Pairing carries one thing across messages, the ids of the calls
//! kept so far (a later call with one is a duplicate); results pair only
//! within their own call's reach (OpenAI: up to the next assistant
//! message; Anthropic: the next user message, or for a server tool its own
//! message, where the pause rule looks only at the history's last message,
//! always in the tail). So if every message of the
//! tail holding such an id comes at or after the tail's first assistant
//! message (no result of it can belong to a call before `c`), the tail run
//! with the calls kept before `c` given as already made
//! ([`Sanitizer::sanitize_after`](super::Sanitizer::sanitize_after))
//! answers as the whole funnel does. The binding checks each condition;
//! anything else is answered by the whole funnel.

use crate::json::{JsonValue, Kind};

/// The ids of the tool calls an assistant `message` makes, as pairing
/// counts them: OpenAI `tool_calls`, or (`anthropic`) `tool_use` blocks and
/// server tool uses (one id space: a later use of a kept id is a duplicate).
pub fn called_ids<J: JsonValue>(message: &J, anthropic: bool) -> Vec<String> {
    let mut ids = Vec::new();
    let assistant = message.kind() == Kind::Object
        && message
            .get("role")
            .is_some_and(|role| role.as_str().is_some_and(|r| r == "assistant"));
    if !assistant {
        return ids;
    }
    let id_of = |value: &J| {
        value
            .get("id")
            .and_then(|id| id.as_str().map(std::borrow::Cow::into_owned))
    };
    if !anthropic {
        if let Some(calls) = message
            .get("tool_calls")
            .filter(|c| c.kind() == Kind::Array)
        {
            ids.extend(calls.items().filter_map(|call| id_of(&call)));
        }
        return ids;
    }
    if let Some(content) = message.get("content").filter(|c| c.kind() == Kind::Array) {
        for block in content.items() {
            let tool_use = block.get("type").is_some_and(|kind| {
                kind.as_str().is_some_and(|k| {
                    matches!(k.as_ref(), "tool_use" | "server_tool_use" | "mcp_tool_use")
                })
            });
            if let Some(id) = Some(&block).filter(|_| tool_use).and_then(id_of) {
                ids.push(id);
            }
        }
    }
    ids
}

/// What extending a clean history needs to know of one message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Joint {
    /// The tool-call ids it holds: of its calls and of the calls it answers.
    pub ids: Vec<String>,
    /// A system or developer message.
    pub system: bool,
    /// A user message with text of its own and no tool results.
    pub turn_start: bool,
    /// An assistant message.
    pub assistant: bool,
}

/// The joint facts of `message`; `None` for anything the whole funnel must
/// judge (not a dict, no string role, a legacy function call, ids that
/// are not strings).
pub fn joint<J: JsonValue>(message: &J) -> Option<Joint> {
    if message.kind() != Kind::Object {
        return None;
    }
    let role = message.get("role")?;
    let role = role.as_str()?;
    if message
        .get("function_call")
        .is_some_and(|call| call.kind() != Kind::Null)
    {
        return None;
    }
    let mut joint = Joint {
        system: matches!(role.as_ref(), "system" | "developer"),
        assistant: role == "assistant",
        ..Joint::default()
    };
    if let Some(calls) = message.get("tool_calls").filter(|c| c.kind() != Kind::Null) {
        if calls.kind() != Kind::Array {
            return None;
        }
        for call in calls.items() {
            joint.ids.push(call.get("id")?.as_str()?.into_owned());
        }
    }
    if let Some(id) = message
        .get("tool_call_id")
        .filter(|i| i.kind() != Kind::Null)
    {
        joint.ids.push(id.as_str()?.into_owned());
    }
    let mut text = false;
    let mut results = false;
    match message.get("content") {
        Some(content) if content.kind() == Kind::Array => {
            for block in content.items() {
                let kind = block.get("type")?;
                match kind.as_str()?.as_ref() {
                    "tool_use" | "server_tool_use" | "mcp_tool_use" => {
                        joint.ids.push(block.get("id")?.as_str()?.into_owned());
                    }
                    "tool_result" => {
                        results = true;
                        joint
                            .ids
                            .push(block.get("tool_use_id")?.as_str()?.into_owned());
                    }
                    // A server tool's result (its use is in the same message).
                    other if other.ends_with("_tool_result") => {
                        joint
                            .ids
                            .push(block.get("tool_use_id")?.as_str()?.into_owned());
                    }
                    "text" | "input_text" | "output_text" => {
                        text |= block
                            .get("text")
                            .and_then(|t| t.as_str().map(|t| !t.trim().is_empty()))
                            .unwrap_or(false);
                    }
                    _ => {}
                }
            }
        }
        Some(content) => {
            text = content.as_str().is_some_and(|t| !t.trim().is_empty());
        }
        None => {}
    }
    joint.turn_start = role == "user" && text && !results;
    Some(joint)
}
