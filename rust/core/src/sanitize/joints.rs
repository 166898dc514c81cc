//! Where a clean history can be extended without running the funnel over
//! all of it again.
//!
//! Take a history `P` the funnel left unchanged, and `P + S` with new
//! messages `S`. Let `c` be the index of the last message of `P` that starts
//! a turn (a user message with text of its own and no tool results). Then
//! `P + S` comes back unchanged exactly when `P[c..] + S` does, provided no
//! tool-call id of `P[c..] + S` also occurs in `P[..c]` and `P[c..] + S`
//! holds no system or developer message:
//!
//! - stage 1 judges each message alone, so `P[..c]` passes again;
//! - no merge crosses `c`: `P[c - 1]` and `P[c]` were neighbours in a clean
//!   `P`, so their roles differ (or stage 2 would have merged them);
//! - no pairing crosses `c`: in a clean `P` every result directly follows
//!   its call (the next message, for Anthropic), and `P[c]` holds none, so
//!   every call before `c` is answered before `c`; the ids after `c` are
//!   distinct from those before, so nothing after `c` can claim or
//!   duplicate them;
//! - the first-message rule is met on both sides (`P[0]`, and the user
//!   message `P[c]`), and with no system message after `c` nothing there is
//!   lifted out.
//!
//! The binding keeps the clean histories it has seen and checks each of
//! these conditions; anything else is answered by the whole funnel.

use crate::json::{JsonValue, Kind};

/// What extending a clean history needs to know of one message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Joint {
    /// The tool-call ids it holds: of its calls and of the calls it answers.
    pub ids: Vec<String>,
    /// A system or developer message.
    pub system: bool,
    /// A user message with text of its own and no tool results.
    pub turn_start: bool,
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
                    "tool_use" => joint.ids.push(block.get("id")?.as_str()?.into_owned()),
                    "tool_result" => {
                        results = true;
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
