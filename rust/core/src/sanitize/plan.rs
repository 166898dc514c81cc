//! What the funnel decided, as references into the input: the binding builds
//! the output messages from these, reusing every object it can.

/// One message of the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutMessage {
    /// Input message `i`, untouched: the output holds the very same object.
    Original(usize),
    /// A message rebuilt from parts of the input.
    Built(BuiltMessage),
}

/// A rebuilt message: a shallow copy of `base` (all its keys) with edits, or
/// a new message when there is no base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltMessage {
    /// Input message whose keys are copied; `None` for an inserted message.
    pub base: Option<usize>,
    /// New `role`, if it changes.
    pub role: Option<&'static str>,
    /// New `content`, if it changes.
    pub content: Option<OutContent>,
    /// New `tool_calls` (OpenAI), if they change; empty means remove the key.
    pub tool_calls: Option<Vec<CallRef>>,
    /// New `tool_call_id`, if it changes (a converted legacy function result).
    pub tool_call_id: Option<String>,
    /// Keys of `base` to leave out.
    pub remove: Vec<&'static str>,
}

/// Content of a rebuilt message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutContent {
    /// The string contents of these input messages, joined by [`TEXT_SEPARATOR`].
    Texts(Vec<usize>),
    /// A list of blocks (content parts).
    Blocks(Vec<BlockRef>),
    /// A literal text (an inserted message; the empty string of a tool
    /// message whose content list had blank text parts only).
    Literal(String),
    /// No content (`None`).
    Null,
}

/// Where a block of the output comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRef {
    /// Block `block` of input message `message`'s content list.
    Block { message: usize, block: usize },
    /// Block `block` of input message `message`'s content list, a
    /// `tool_result` whose `content` list holds blank text parts (see
    /// [`is_blank_text_part`](super::is_blank_text_part)): a shallow copy of
    /// it whose `content` is the list without them, or the empty string when
    /// no part is left.
    TrimmedResult { message: usize, block: usize },
    /// Input message `message`'s string content, as a `{"type": "text"}` block.
    TextOf { message: usize },
}

/// Where a tool call of the output comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallRef {
    /// Entry `call` of input message `message`'s `tool_calls`.
    Call { message: usize, call: usize },
    /// Input message `message`'s legacy `function_call`, as a tool call with
    /// the id [`legacy_call_id`]`(message)`.
    Legacy { message: usize },
}

/// Separator between the texts of merged string contents.
pub const TEXT_SEPARATOR: &str = "\n\n";

/// The id a converted legacy `function_call` of input message `message` gets.
pub fn legacy_call_id(message: usize) -> String {
    format!("call_legacy_{message}")
}

/// One change the funnel made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Stage 1 (drop), 2 (merge), 3 (orphans) or 4 (merge again, provider rules).
    pub stage: u8,
    /// The input message concerned; `None` for an inserted message.
    pub index: Option<usize>,
    /// A short code: `drop_invalid`, `drop_role`, `drop_placeholder`, ...
    pub action: &'static str,
    /// What happened, for people.
    pub reason: String,
}

/// The funnel's decision for one history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub messages: Vec<OutMessage>,
    /// Anthropic: contents lifted out of system/developer messages, in order.
    pub system: Vec<OutContent>,
    pub changes: Vec<Change>,
}

impl Plan {
    /// Whether the input came back unchanged.
    pub fn is_unchanged(&self) -> bool {
        self.changes.is_empty()
    }
}
