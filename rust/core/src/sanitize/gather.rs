//! Reading the input: what the funnel needs to know of each message, as small
//! records of indices and id hashes (no strings are copied).

use rustc_hash::FxHashMap;

use super::patterns::is_blank;
use super::plan::{BlockRef, CallRef, TEXT_SEPARATOR, legacy_call_id};
use crate::error::{Error, Result};
use crate::json::{JsonValue, Kind, wrong_type};

/// The roles the funnel knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
    Unknown,
}

impl Role {
    fn parse(role: &str) -> Self {
        match role {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            "function" => Role::Function,
            _ => Role::Unknown,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Function => "function",
            Role::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockKind {
    Text {
        blank: bool,
    },
    Thinking,
    ToolUse,
    ToolResult,
    /// An Anthropic server tool's use (`server_tool_use`, `mcp_tool_use`).
    ServerUse,
    /// Its result (a type ending in `_tool_result`), in the same assistant message.
    ServerResult,
    Other,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    pub src: BlockRef,
    pub kind: BlockKind,
    /// Hash of the `id` (a `tool_use`, a server tool use) or `tool_use_id`
    /// (a `tool_result`, a server tool result).
    pub id: IdHash,
}

#[derive(Clone, Debug)]
pub(crate) enum Content {
    Absent,
    /// The string content of this message.
    Text(usize),
    /// String contents of these messages, merged.
    Texts(Vec<usize>),
    Blocks(Vec<Block>),
    /// The empty string: a tool message's content list of blank text parts only.
    EmptyText,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub src: CallRef,
    pub id: IdHash,
}

/// A message under construction.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)] // independent facts about one message
pub(crate) struct Item {
    /// The input message whose other keys the output keeps.
    pub origin: usize,
    pub role: Role,
    pub name: Option<IdHash>,
    pub content: Content,
    /// Whether the base message's string content is blank (for `Texts([origin])`).
    pub blank_text: bool,
    /// OpenAI tool calls (and a legacy `function_call`).
    pub calls: Vec<Call>,
    /// Tool messages: hash of the call id they answer.
    pub answers: Option<IdHash>,
    /// Legacy function name (`function_call.name`, or a function message's `name`).
    pub function_name: Option<IdHash>,
    pub has_function_call: bool,
    /// The `function_call` became a tool call (stage 1, `convert_function`).
    pub legacy_call: bool,
    pub empty_tool_calls: bool,
    pub content_changed: bool,
    pub calls_changed: bool,
    pub converted_from_function: bool,
    /// A converted function result: the assistant message whose legacy call it answers.
    pub legacy_of: Option<usize>,
}

/// An id or name, as a number that is equal exactly when the texts are: a
/// result pairs with its call by the id itself, never by a hash two
/// different ids could share. Records stay small (4 bytes an id).
pub(crate) type IdHash = u32;

/// The ids and names of one sanitize run, each distinct text numbered once.
#[derive(Default)]
pub(crate) struct Ids {
    numbers: FxHashMap<Box<str>, IdHash>,
}

impl Ids {
    pub(crate) fn key(&mut self, id: &str) -> IdHash {
        if let Some(&number) = self.numbers.get(id) {
            return number;
        }
        let number = IdHash::try_from(self.numbers.len()).expect("under 2^32 distinct ids");
        self.numbers.insert(id.into(), number);
        number
    }
}

fn missing(path: &str) -> Error {
    Error::MissingField {
        path: path.to_owned(),
    }
}

/// A string field: `None` if absent or null, an error if not a string.
fn optional_str<'v, J: JsonValue>(
    value: Option<&'v J>,
    path: &str,
) -> Result<Option<std::borrow::Cow<'v, str>>> {
    match value {
        None => Ok(None),
        Some(v) if v.kind() == Kind::Null => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| wrong_type(path, "str", v)),
    }
}

/// The record of input message `index`, or why it is malformed (paths are
/// relative to the message).
pub(crate) fn read<J: JsonValue>(index: usize, message: &J, ids: &mut Ids) -> Result<Item> {
    if message.kind() != Kind::Object {
        return Err(wrong_type("", "a message dict", message));
    }
    let role = message.get("role").ok_or_else(|| missing("role"))?;
    let role_text = role
        .as_str()
        .ok_or_else(|| wrong_type("role", "str", &role))?;
    let role = Role::parse(&role_text);
    // Most messages hold only role and content: stop looking once every key is found.
    let mut fields = Fields {
        message,
        left: message.len() - 1,
    };
    let mut item = Item {
        origin: index,
        role,
        name: None,
        content: Content::Absent,
        blank_text: false,
        calls: Vec::new(),
        answers: None,
        function_name: None,
        has_function_call: false,
        legacy_call: false,
        empty_tool_calls: false,
        content_changed: false,
        calls_changed: false,
        converted_from_function: false,
        legacy_of: None,
    };
    if let Some(content) = fields.get("content") {
        item.content = match content.kind() {
            Kind::Null => Content::Absent,
            Kind::String => {
                item.blank_text = is_blank(&content.as_str().unwrap_or_default());
                Content::Text(index)
            }
            Kind::Array => Content::Blocks(read_blocks(index, &content, ids)?),
            _ => {
                return Err(wrong_type(
                    "content",
                    "str, a list of content blocks, or None",
                    &content,
                ));
            }
        };
    }
    let name = fields.get("name");
    item.name = optional_str(name.as_ref(), "name")?.map(|n| ids.key(&n));
    let refusal = fields.get("refusal");
    // A refusal is checked for its type only: it is not content (the API
    // requires content unless there are tool calls).
    optional_str(refusal.as_ref(), "refusal")?;
    if let Some(calls) = fields.get("tool_calls").filter(|c| c.kind() != Kind::Null) {
        item.calls = read_calls(index, &calls, ids)?;
        item.empty_tool_calls = item.calls.is_empty();
    }
    let answers = fields.get("tool_call_id");
    item.answers = optional_str(answers.as_ref(), "tool_call_id")?.map(|id| ids.key(&id));
    if let Some(call) = fields
        .get("function_call")
        .filter(|c| c.kind() != Kind::Null)
    {
        if call.kind() != Kind::Object {
            return Err(wrong_type(
                "function_call",
                "a dict with name and arguments",
                &call,
            ));
        }
        let name = call.get("name");
        let name = optional_str(name.as_ref(), "function_call.name")?
            .ok_or_else(|| missing("function_call.name"))?;
        item.function_name = Some(ids.key(&name));
        // Never valid as it is: stage 1 converts it or removes it.
        item.has_function_call = true;
    }
    if role == Role::Function {
        item.function_name = item.name;
    }
    Ok(item)
}

/// Looks keys up in a message until all of its keys have been found.
struct Fields<'m, J> {
    message: &'m J,
    left: usize,
}

impl<J: JsonValue> Fields<'_, J> {
    fn get(&mut self, key: &'static str) -> Option<J> {
        if self.left == 0 {
            return None;
        }
        let value = self.message.get(key)?;
        self.left -= 1;
        Some(value)
    }
}

/// OpenAI `tool_calls`: each call's id, numbered.
fn read_calls<J: JsonValue>(index: usize, calls: &J, ids: &mut Ids) -> Result<Vec<Call>> {
    if calls.kind() != Kind::Array {
        return Err(wrong_type("tool_calls", "a list of tool calls", calls));
    }
    let mut out = Vec::with_capacity(calls.len());
    for (i, call) in calls.items().enumerate() {
        // Paths are formatted only for an error: this runs on every call, every turn.
        let at = || format!("tool_calls[{i}]");
        if call.kind() != Kind::Object {
            return Err(wrong_type(&at(), "a tool call dict", &call));
        }
        let id = call
            .get("id")
            .ok_or_else(|| missing(&format!("{}.id", at())))?;
        let id = id
            .as_str()
            .ok_or_else(|| wrong_type(&format!("{}.id", at()), "str", &id))?;
        out.push(Call {
            src: CallRef::Call {
                message: index,
                call: i,
            },
            id: ids.key(&id),
        });
    }
    Ok(out)
}

fn read_blocks<J: JsonValue>(index: usize, content: &J, ids: &mut Ids) -> Result<Vec<Block>> {
    let mut blocks = Vec::with_capacity(content.len());
    for (j, block) in content.items().enumerate() {
        let at = |field: &str| format!("content[{j}]{field}");
        if block.kind() != Kind::Object {
            return Err(wrong_type(&at(""), "a content block dict", &block));
        }
        let kind = block.get("type").ok_or_else(|| missing(&at(".type")))?;
        let kind = kind
            .as_str()
            .ok_or_else(|| wrong_type(&at(".type"), "str", &kind))?;
        let mut id_field = |field: &'static str| -> Result<IdHash> {
            let value = block
                .get(field)
                .ok_or_else(|| missing(&at(&format!(".{field}"))))?;
            value
                .as_str()
                .map(|id| ids.key(&id))
                .ok_or_else(|| wrong_type(&at(&format!(".{field}")), "str", &value))
        };
        let (kind, id) = match kind.as_ref() {
            "text" | "input_text" | "output_text" => {
                let value = block.get("text").ok_or_else(|| missing(&at(".text")))?;
                let text = value
                    .as_str()
                    .ok_or_else(|| wrong_type(&at(".text"), "str", &value))?;
                (
                    BlockKind::Text {
                        blank: is_blank(&text),
                    },
                    0,
                )
            }
            "thinking" | "redacted_thinking" => (BlockKind::Thinking, 0),
            "tool_use" => (BlockKind::ToolUse, id_field("id")?),
            "tool_result" => (BlockKind::ToolResult, id_field("tool_use_id")?),
            "server_tool_use" | "mcp_tool_use" => (BlockKind::ServerUse, id_field("id")?),
            other if other.ends_with("_tool_result") => {
                (BlockKind::ServerResult, id_field("tool_use_id")?)
            }
            _ => (BlockKind::Other, 0),
        };
        // A tool result's own text parts are held to the same rule (A5).
        let trimmed = kind == BlockKind::ToolResult
            && block.get("content").is_some_and(|parts| {
                parts.kind() == Kind::Array && parts.items().any(|part| is_blank_text_part(&part))
            });
        let src = if trimmed {
            BlockRef::TrimmedResult {
                message: index,
                block: j,
            }
        } else {
            BlockRef::Block {
                message: index,
                block: j,
            }
        };
        blocks.push(Block { src, kind, id });
    }
    Ok(blocks)
}

/// Whether `part`, an entry of a `tool_result` block's `content` list, is a
/// text block whose text is blank (only Unicode `White_Space`): the API refuses
/// it there as at the top level, and sanitize leaves it out. Anything else
/// (another type, a text that is not a string) is kept as it is.
pub fn is_blank_text_part<J: JsonValue>(part: &J) -> bool {
    part.kind() == Kind::Object
        && part.get("type").is_some_and(|kind| {
            kind.as_str()
                .is_some_and(|kind| matches!(kind.as_ref(), "text" | "input_text" | "output_text"))
        })
        && part
            .get("text")
            .is_some_and(|text| text.as_str().is_some_and(|text| is_blank(&text)))
}

/// The positions of the blank text parts in the `content` list of block
/// `block` of `messages[message]` (a tool result), for reports.
pub(crate) fn blank_parts<J: JsonValue>(
    messages: &[J],
    message: usize,
    block: usize,
) -> Vec<usize> {
    messages[message]
        .get("content")
        .and_then(|content| content.items().nth(block))
        .and_then(|result| result.get("content"))
        .map(|parts| {
            parts
                .items()
                .enumerate()
                .filter(|(_, part)| is_blank_text_part(part))
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default()
}

/// Run `check` on the text of an item whose content is only text: its
/// string content (borrowed, not copied), its merged string contents, or its
/// text blocks joined by newlines. `None` for anything else.
pub(crate) fn with_item_text<J: JsonValue, R>(
    messages: &[J],
    item: &Item,
    check: impl Fn(&str) -> Option<R>,
) -> Option<R> {
    let string_of = |message: usize| {
        messages[message]
            .get("content")
            .and_then(|c| c.as_str().map(std::borrow::Cow::into_owned))
    };
    match &item.content {
        Content::Absent => None,
        Content::EmptyText => check(""),
        Content::Text(message) => {
            let content = messages[*message].get("content")?;
            let text = content.as_str()?;
            check(&text)
        }
        Content::Texts(sources) => {
            let texts: Option<Vec<String>> = sources.iter().map(|&m| string_of(m)).collect();
            check(&texts?.join(TEXT_SEPARATOR))
        }
        Content::Blocks(blocks) => {
            let all_text = blocks
                .iter()
                .all(|b| matches!(b.kind, BlockKind::Text { .. }));
            if blocks.is_empty() || !all_text {
                return None;
            }
            let texts: Option<Vec<String>> = blocks
                .iter()
                .map(|b| match b.src {
                    BlockRef::TextOf { message } => string_of(message),
                    BlockRef::TrimmedResult { .. } => None, // not text
                    BlockRef::Block { message, block } => messages[message]
                        .get("content")?
                        .items()
                        .nth(block)?
                        .get("text")?
                        .as_str()
                        .map(std::borrow::Cow::into_owned),
                })
                .collect();
            check(&texts?.join("\n"))
        }
    }
}

/// The id text of a call, for reports.
pub(crate) fn call_id_text<J: JsonValue>(messages: &[J], call: CallRef) -> String {
    match call {
        CallRef::Legacy { message } => legacy_call_id(message),
        CallRef::Call { message, call } => messages[message]
            .get("tool_calls")
            .and_then(|calls| calls.items().nth(call))
            .and_then(|c| c.get("id"))
            .and_then(|id| id.as_str().map(std::borrow::Cow::into_owned))
            .unwrap_or_default(),
    }
}

/// The `id` / `tool_use_id` text of an input block, for reports.
pub(crate) fn block_id_text<J: JsonValue>(
    messages: &[J],
    block: BlockRef,
    field: &'static str,
) -> String {
    match block {
        BlockRef::TextOf { .. } => String::new(),
        BlockRef::Block { message, block } | BlockRef::TrimmedResult { message, block } => messages
            [message]
            .get("content")
            .and_then(|content| content.items().nth(block))
            .and_then(|b| b.get(field))
            .and_then(|id| id.as_str().map(std::borrow::Cow::into_owned))
            .unwrap_or_default(),
    }
}

/// A tool message's `tool_call_id`, for reports.
pub(crate) fn answer_id_text<J: JsonValue>(message: &J) -> Option<String> {
    message
        .get("tool_call_id")
        .and_then(|id| id.as_str().map(std::borrow::Cow::into_owned))
}
