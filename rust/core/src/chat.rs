//! Chat accounting: what a list of messages (and tool schemas) costs in tokens.
//!
//! Messages follow OpenAI's published formula (the "How to count tokens with
//! tiktoken" cookbook): 3 tokens a message for its framing, the tokens of its
//! role and text, 1 more for a `name`, and 3 at the end to prime the reply. That
//! formula reproduces the API's own `prompt_tokens` for the cookbook's examples,
//! which the test suite checks. The same rules are extended, and documented in
//! README.md, to the parts the cookbook does not cover: content parts, tool
//! calls, and Anthropic blocks (text, `tool_use`, `tool_result`, thinking, images).
//! Every text goes through the count cache, so recounting an unchanged history
//! costs hashing, not BPE.

use std::borrow::Cow;

use crate::document::PDF_TYPE;
use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::json::{JsonValue, Kind, MAX_DEPTH, key_text, wrong_type};
use crate::tokenizer::Tokenizer;

/// Framing of every message (`<|start|>{role}<|message|>…<|end|>`).
pub const TOKENS_PER_MESSAGE: usize = 3;
/// Extra cost of a `name` field.
pub const TOKENS_PER_NAME: usize = 1;
pub use crate::limits::REPLY_PRIMING;
/// Framing of one tool call or `tool_use` / `tool_result` block.
pub const TOKENS_PER_TOOL_CALL: usize = 3;
/// An OpenAI image part at `detail: "low"`.
pub const IMAGE_TOKENS_LOW: usize = 85;
/// Any other OpenAI image part: a 1024x1024 image at high detail (85 + 4 x 170).
pub const IMAGE_TOKENS: usize = 765;
/// An Anthropic image block: the largest image the API takes without resizing
/// (about 1.15 megapixels / 750 pixels a token).
pub const ANTHROPIC_IMAGE_TOKENS: usize = 1_600;

/// Per-schema constants of the cookbook's `num_tokens_for_tools`, by encoding.
struct ToolCosts {
    func_init: isize,
    prop_init: isize,
    prop_key: isize,
    enum_init: isize,
    enum_item: isize,
    func_end: isize,
}

fn tool_costs(encoding: Encoding) -> ToolCosts {
    ToolCosts {
        func_init: if encoding == Encoding::O200kBase {
            7
        } else {
            10
        },
        prop_init: 3,
        prop_key: 3,
        enum_init: -3,
        enum_item: 3,
        func_end: 12,
    }
}

/// The fields of a message that cost tokens.
pub struct MessageFields<J> {
    pub role: Option<J>,
    pub name: Option<J>,
    pub content: Option<J>,
    pub refusal: Option<J>,
    pub tool_calls: Option<J>,
    pub function_call: Option<J>,
}

impl<J: JsonValue> MessageFields<J> {
    /// The keys [`MessageFields::of`] reads, in field order.
    pub const KEYS: [&'static str; 6] = [
        "role",
        "name",
        "content",
        "refusal",
        "tool_calls",
        "function_call",
    ];

    pub fn of(message: &J) -> Self {
        Self::from(message.pick(&Self::KEYS))
    }
}

impl<J> From<[Option<J>; 6]> for MessageFields<J> {
    /// From values picked in the order of [`MessageFields::KEYS`].
    fn from([role, name, content, refusal, tool_calls, function_call]: [Option<J>; 6]) -> Self {
        Self {
            role,
            name,
            content,
            refusal,
            tool_calls,
            function_call,
        }
    }
}

impl Tokenizer {
    /// Tokens of one message, without the reply priming.
    pub fn count_message<J: JsonValue>(&self, message: &J) -> Result<usize> {
        if message.kind() != Kind::Object {
            return Err(wrong_type("", "a message dict", message));
        }
        self.count_fields(&MessageFields::of(message))
    }

    /// Tokens of a message from its fields (read once by the caller).
    pub fn count_fields<J: JsonValue>(&self, fields: &MessageFields<J>) -> Result<usize> {
        self.count_fields_keyed(fields, None)
    }

    /// [`Tokenizer::count_fields`]; `content_key` is the [`text_key`](crate::text_key)
    /// of a string content the caller has already hashed.
    pub fn count_fields_keyed<J: JsonValue>(
        &self,
        fields: &MessageFields<J>,
        content_key: Option<u128>,
    ) -> Result<usize> {
        let role = fields.role.as_ref().ok_or_else(|| missing("role"))?;
        let mut total = TOKENS_PER_MESSAGE + self.count_role(&required_str(role, "role")?);
        if let Some(name) = present_field(fields.name.as_ref()) {
            total += self.count_cached(&required_str(name, "name")?) + TOKENS_PER_NAME;
        }
        if let Some(content) = present_field(fields.content.as_ref()) {
            total += match (content_key, content.as_str()) {
                (Some(key), Some(text)) => self.count_keyed(&text, key),
                _ => self
                    .content_tokens(content, 0)
                    .map_err(|e| e.within("content"))?,
            };
        }
        if let Some(refusal) = present_field(fields.refusal.as_ref()) {
            total += self.count_cached(&required_str(refusal, "refusal")?);
        }
        if let Some(calls) = present_field(fields.tool_calls.as_ref()) {
            if calls.kind() != Kind::Array {
                return Err(wrong_type("tool_calls", "a list of tool calls", calls));
            }
            for (i, call) in calls.items().enumerate() {
                total += self
                    .tool_call_tokens(&call)
                    .map_err(|e| e.within(&format!("tool_calls[{i}]")))?;
            }
        }
        if let Some(call) = present_field(fields.function_call.as_ref()) {
            total += self
                .function_tokens(call)
                .map_err(|e| e.within("function_call"))?;
        }
        Ok(total)
    }

    /// Tokens of a whole request: every message, the reply priming, and the
    /// tool schemas if any.
    pub fn count_messages<J: JsonValue>(
        &self,
        messages: &[J],
        tools: Option<&[J]>,
    ) -> Result<usize> {
        let mut total = REPLY_PRIMING;
        for (i, message) in messages.iter().enumerate() {
            total += self
                .count_message(message)
                .map_err(|e| e.within(&format!("messages[{i}]")))?;
        }
        if let Some(tools) = tools {
            total += self.count_tools(tools)?;
        }
        Ok(total)
    }

    /// Tokens the API bills for tool (function) schemas, by the cookbook's
    /// `num_tokens_for_tools`, extended to nested objects and array items.
    /// Takes OpenAI tools (`{"type": "function", "function": {...}}`), bare
    /// function schemas, and Anthropic tools (`input_schema`).
    pub fn count_tools<J: JsonValue>(&self, tools: &[J]) -> Result<usize> {
        if tools.is_empty() {
            return Ok(0);
        }
        let costs = tool_costs(self.encoding());
        let mut total = costs.func_end;
        for (i, tool) in tools.iter().enumerate() {
            total += self
                .tool_schema_tokens(tool, &costs)
                .map_err(|e| e.within(&format!("tools[{i}]")))?;
        }
        Ok(total.max(0) as usize)
    }

    fn content_tokens<J: JsonValue>(&self, content: &J, depth: usize) -> Result<usize> {
        match content.kind() {
            Kind::String => {
                Ok(self.count_str_value(content, &content.as_str().unwrap_or_default()))
            }
            Kind::Array => {
                let mut total = 0;
                for (i, block) in content.items().enumerate() {
                    total += self
                        .block_tokens(&block, depth)
                        .map_err(|e| e.within(&format!("[{i}]")))?;
                }
                Ok(total)
            }
            _ => Err(wrong_type(
                "",
                "str, a list of content blocks, or None",
                content,
            )),
        }
    }

    fn block_tokens<J: JsonValue>(&self, block: &J, depth: usize) -> Result<usize> {
        match block.kind() {
            Kind::Object => {}
            Kind::String => {
                return Ok(self.count_str_value(block, &block.as_str().unwrap_or_default()));
            }
            _ => return Err(wrong_type("", "a content block dict or str", block)),
        }
        let kind = block.get("type").ok_or_else(|| missing("type"))?;
        let kind = required_str(&kind, "type")?;
        let text_of = |field: &'static str| -> Result<usize> {
            let value = block.get(field).ok_or_else(|| missing(field))?;
            Ok(self.count_str_value(&value, &required_str(&value, field)?))
        };
        match kind.as_ref() {
            "text" | "input_text" | "output_text" => text_of("text"),
            "refusal" => text_of("refusal"),
            "thinking" => text_of("thinking"),
            "redacted_thinking" => text_of("data"),
            "image_url" | "input_image" => {
                let detail = block
                    .get("image_url")
                    .and_then(|url| url.get("detail"))
                    .or_else(|| block.get("detail"));
                let low = detail.is_some_and(|d| d.as_str().as_deref() == Some("low"));
                Ok(if low { IMAGE_TOKENS_LOW } else { IMAGE_TOKENS })
            }
            "image" => Ok(ANTHROPIC_IMAGE_TOKENS),
            "tool_use" | "server_tool_use" => {
                let name = text_of("name")?;
                let input = match present(block.get("input")) {
                    Some(input) => {
                        self.count_cached(&input.to_compact().map_err(|e| e.within("input"))?)
                    }
                    None => 0,
                };
                Ok(TOKENS_PER_TOOL_CALL + name + input)
            }
            kind if kind == "tool_result" || kind.ends_with("_tool_result") => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep());
                }
                let content = match present(block.get("content")) {
                    // A server tool's result may hold one object (an error,
                    // a code run's output): counted as its JSON text.
                    Some(content) if kind != "tool_result" && content.kind() == Kind::Object => {
                        self.count_cached(&content.to_compact().map_err(|e| e.within("content"))?)
                    }
                    Some(content) => self
                        .content_tokens(&content, depth + 1)
                        .map_err(|e| e.within("content"))?,
                    None => 0,
                };
                Ok(TOKENS_PER_TOOL_CALL + content)
            }
            "document" => self.document_tokens(block, depth),
            "file" => match present(block.get("file")) {
                Some(file) => self.file_tokens(&file, block),
                None => Ok(self.count_cached(&block.to_compact()?)),
            },
            "input_file" => self.file_tokens(block, block),
            _ => Ok(self.count_cached(&block.to_compact()?)),
        }
    }

    /// An Anthropic `document`: a base64 PDF by its pages, a `text` source
    /// by its text, a `content` source by its blocks, each with the
    /// document's `title` and `context`. One by URL or file id, or a PDF
    /// whose pages are not found, counts as its JSON text.
    fn document_tokens<J: JsonValue>(&self, block: &J, depth: usize) -> Result<usize> {
        let source = present(block.get("source")).filter(|s| s.kind() == Kind::Object);
        let kind = source
            .as_ref()
            .and_then(|s| s.get("type"))
            .and_then(|k| k.as_str().map(Cow::into_owned));
        let data = || source.as_ref().and_then(|s| present(s.get("data")));
        // A base64 source of another type than a PDF is not read as one.
        let pdf_type = || {
            source
                .as_ref()
                .and_then(|s| present(s.get("media_type")))
                .is_none_or(|t| t.as_str().is_some_and(|t| t.eq_ignore_ascii_case(PDF_TYPE)))
        };
        let body = match kind.as_deref() {
            Some("base64") if pdf_type() => {
                data().and_then(|d| d.as_str().and_then(|text| self.pdf_tokens_cached(&text)))
            }
            Some("text") => {
                data().and_then(|d| d.as_str().map(|text| self.count_str_value(&d, &text)))
            }
            Some("content") => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep());
                }
                match source.as_ref().and_then(|s| present(s.get("content"))) {
                    Some(content) => Some(
                        self.content_tokens(&content, depth + 1)
                            .map_err(|e| e.within("source.content"))?,
                    ),
                    None => Some(0),
                }
            }
            _ => None,
        };
        match body {
            Some(body) => Ok(body + self.texts_of(block, &["title", "context"])?),
            None => Ok(self.count_cached(&block.to_compact()?)),
        }
    }

    /// An OpenAI file part (`fields`: the `file` of a Chat Completions
    /// `{"type": "file"}` part, or a Responses `input_file` itself): a PDF
    /// in `file_data` by its pages, with its `filename`. One by file id or
    /// URL, or not a PDF whose pages are found, counts as the whole part's
    /// JSON text.
    fn file_tokens<J: JsonValue>(&self, fields: &J, block: &J) -> Result<usize> {
        let pages = present(fields.get("file_data"))
            .and_then(|d| d.as_str().and_then(|text| self.pdf_tokens_cached(&text)));
        // A Chat Completions part's fields are under its `file`.
        let nested = !std::ptr::eq(fields, block);
        match pages {
            Some(pages) => {
                let named = self
                    .texts_of(fields, &["filename"])
                    .map_err(|e| if nested { e.within("file") } else { e })?;
                Ok(pages + named)
            }
            None => Ok(self.count_cached(&block.to_compact()?)),
        }
    }

    /// The tokens of the `names` fields present in `object`: a str as its
    /// text, anything else as its JSON text.
    fn texts_of<J: JsonValue>(&self, object: &J, names: &[&'static str]) -> Result<usize> {
        let mut total = 0;
        for &name in names {
            if let Some(value) = present(object.get(name)) {
                total += match value.as_str() {
                    Some(text) => self.count_str_value(&value, &text),
                    None => self.count_cached(&value.to_compact().map_err(|e| e.within(name))?),
                };
            }
        }
        Ok(total)
    }

    /// A function call (`{"function": {"name", "arguments"}}`), or a custom
    /// tool's call (`{"custom": {"name", "input"}}`), its input counted as
    /// a function's arguments are.
    fn tool_call_tokens<J: JsonValue>(&self, call: &J) -> Result<usize> {
        if call.kind() != Kind::Object {
            return Err(wrong_type("", "a tool call dict", call));
        }
        if let Some(function) = call.get("function") {
            return self
                .call_tokens(&function, "arguments")
                .map_err(|e| e.within("function"));
        }
        if let Some(custom) = call.get("custom") {
            return self
                .call_tokens(&custom, "input")
                .map_err(|e| e.within("custom"));
        }
        Err(missing("function"))
    }

    /// `{"name": ..., "arguments": ...}` of a tool call or legacy function call.
    fn function_tokens<J: JsonValue>(&self, function: &J) -> Result<usize> {
        self.call_tokens(function, "arguments")
    }

    /// A call's name and its `arguments` (or a custom call's `input`).
    fn call_tokens<J: JsonValue>(&self, function: &J, arguments: &'static str) -> Result<usize> {
        if function.kind() != Kind::Object {
            return Err(wrong_type("", "a dict with name and arguments", function));
        }
        let name = function.get("name").ok_or_else(|| missing("name"))?;
        let name = self.count_cached(&required_str(&name, "name")?);
        let field = arguments;
        let arguments = match present(function.get(field)) {
            None => 0,
            Some(arguments) => match arguments.as_str() {
                Some(text) => self.count_cached(&text),
                None => self.count_cached(&arguments.to_compact().map_err(|e| e.within(field))?),
            },
        };
        Ok(TOKENS_PER_TOOL_CALL + name + arguments)
    }

    fn tool_schema_tokens<J: JsonValue>(&self, tool: &J, costs: &ToolCosts) -> Result<isize> {
        if tool.kind() != Kind::Object {
            return Err(wrong_type("", "a tool dict", tool));
        }
        // An OpenAI custom tool (free-text input) names itself under `custom`.
        let custom = tool
            .get("type")
            .and_then(|t| t.as_str().map(|t| t == "custom"))
            == Some(true);
        let (nested, at) = match tool.get("function") {
            Some(function) => (Some(function), "function"),
            None if custom => match tool.get("custom") {
                Some(entry) => (Some(entry), "custom"),
                None => (None, ""),
            },
            None => (None, ""),
        };
        let function = nested.as_ref().unwrap_or(tool);
        let within = |e: Error| if at.is_empty() { e } else { e.within(at) };
        let name = function
            .get("name")
            .ok_or_else(|| within(missing("name")))?;
        let name = required_str(&name, "name").map_err(within)?;
        let description = optional_str(function, "description").map_err(within)?;
        let mut total = costs.func_init
            + self.count_cached(&format!("{name}:{}", strip_final_dot(&description))) as isize;
        let schema = function
            .get("parameters")
            .or_else(|| function.get("input_schema"));
        if let Some(schema) = schema {
            let key = if function.get("parameters").is_some() {
                "parameters"
            } else {
                "input_schema"
            };
            total += self
                .properties_tokens(&schema, costs, 0)
                .map_err(|e| within(e.within(key)))?;
        }
        if at == "custom"
            && let Some(format) = present(function.get("format"))
        {
            // Its grammar or text format, as its JSON text.
            total += self.count_cached(
                &format
                    .to_compact()
                    .map_err(|e| within(e.within("format")))?,
            ) as isize;
        }
        Ok(total)
    }

    /// `prop_init` plus each property of an object schema (recursively), if any.
    fn properties_tokens<J: JsonValue>(
        &self,
        schema: &J,
        costs: &ToolCosts,
        depth: usize,
    ) -> Result<isize> {
        let Some(properties) = schema.get("properties") else {
            return Ok(0);
        };
        if properties.kind() != Kind::Object || properties.is_empty() {
            return Ok(0);
        }
        if depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        let mut total = costs.prop_init;
        for (key, property) in properties.entries() {
            let key = key_text(&key).map_err(|e| e.within("properties"))?;
            total += self
                .property_tokens(&key, &property, costs, depth)
                .map_err(|e| e.within(&format!("properties.{key}")))?;
        }
        Ok(total)
    }

    /// One property: its key, enum values, `key:type:description` line and
    /// nested properties (of an object, or of an array's items).
    fn property_tokens<J: JsonValue>(
        &self,
        key: &str,
        property: &J,
        costs: &ToolCosts,
        depth: usize,
    ) -> Result<isize> {
        let mut total = costs.prop_key;
        if let Some(values) = property.get("enum").filter(|e| e.kind() == Kind::Array) {
            total += costs.enum_init;
            for (i, item) in values.items().enumerate() {
                let text = match item.as_str() {
                    Some(text) => self.count_cached(&text),
                    None => self.count_cached(
                        &item
                            .to_compact()
                            .map_err(|e| e.within(&format!("enum[{i}]")))?,
                    ),
                };
                total += costs.enum_item + text as isize;
            }
        }
        let kind = type_label(property).map_err(|e| e.within("type"))?;
        let description = optional_str(property, "description")?;
        total +=
            self.count_cached(&format!("{key}:{kind}:{}", strip_final_dot(&description))) as isize;
        total += self.properties_tokens(property, costs, depth + 1)?;
        if let Some(items) = property.get("items") {
            total += self
                .properties_tokens(&items, costs, depth + 1)
                .map_err(|e| e.within("items"))?;
        }
        Ok(total)
    }
}

fn too_deep() -> Error {
    Error::TooDeep {
        path: String::new(),
    }
}

/// `value` unless it is absent or JSON null.
fn present<J: JsonValue>(value: Option<J>) -> Option<J> {
    value.filter(|v| v.kind() != Kind::Null)
}

/// A field's value unless it is absent or null (JSON `null`, Python `None`).
fn present_field<J: JsonValue>(value: Option<&J>) -> Option<&J> {
    value.filter(|v| v.kind() != Kind::Null)
}

fn required_str<'v, J: JsonValue>(value: &'v J, path: &str) -> Result<Cow<'v, str>> {
    value.as_str().ok_or_else(|| wrong_type(path, "str", value))
}

fn optional_str<J: JsonValue>(object: &J, key: &'static str) -> Result<String> {
    match present(object.get(key)) {
        None => Ok(String::new()),
        Some(value) => required_str(&value, key).map(Cow::into_owned),
    }
}

/// A property's `type`: the string, a list joined with `" | "`, else `"any"`.
fn type_label<J: JsonValue>(property: &J) -> Result<String> {
    let Some(kind) = property.get("type") else {
        return Ok("any".to_owned());
    };
    if let Some(text) = kind.as_str() {
        return Ok(text.into_owned());
    }
    if kind.kind() == Kind::Array {
        let mut labels = Vec::new();
        for label in kind.items() {
            labels.push(match label.as_str() {
                Some(text) => text.into_owned(),
                None => label.to_compact()?,
            });
        }
        return Ok(labels.join(" | "));
    }
    Ok("any".to_owned())
}

/// The cookbook drops one final period from descriptions.
fn strip_final_dot(text: &str) -> &str {
    text.strip_suffix('.').unwrap_or(text)
}

fn missing(path: &str) -> Error {
    Error::MissingField {
        path: path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Json;

    fn s(text: &str) -> Json<'_> {
        Json::String(text.into())
    }

    fn obj<'a>(entries: Vec<(&'a str, Json<'a>)>) -> Json<'a> {
        Json::Object(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
    }

    fn refs<'j, 'a>(values: &'j [Json<'a>]) -> Vec<&'j Json<'a>> {
        values.iter().collect()
    }

    fn cookbook_messages() -> Vec<Json<'static>> {
        let m = |role, name: Option<&'static str>, content| {
            let mut entries = vec![("role", s(role))];
            if let Some(name) = name {
                entries.push(("name", s(name)));
            }
            entries.push(("content", s(content)));
            obj(entries)
        };
        vec![
            m(
                "system",
                None,
                "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
            ),
            m(
                "system",
                Some("example_user"),
                "New synergies will help drive top-line growth.",
            ),
            m(
                "system",
                Some("example_assistant"),
                "Things working well together will increase revenue.",
            ),
            m(
                "system",
                Some("example_user"),
                "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
            ),
            m(
                "system",
                Some("example_assistant"),
                "Let's talk later when we're less busy about how to do better.",
            ),
            m(
                "user",
                None,
                "This late pivot means we don't have time to boil the ocean for the client deliverable.",
            ),
        ]
    }

    /// The API's `prompt_tokens` for the cookbook's example (published with it).
    #[test]
    fn cookbook_messages_match_the_api() {
        let owned = cookbook_messages();
        let messages = refs(&owned);
        let cl100k = Tokenizer::new(Encoding::Cl100kBase);
        let o200k = Tokenizer::new(Encoding::O200kBase);
        assert_eq!(cl100k.count_messages(&messages, None::<&[&Json]>), Ok(129));
        assert_eq!(o200k.count_messages(&messages, None::<&[&Json]>), Ok(124));
    }

    #[test]
    fn cookbook_tools_match_the_api() {
        let tools = vec![obj(vec![
            ("type", s("function")),
            (
                "function",
                obj(vec![
                    ("name", s("get_current_weather")),
                    (
                        "description",
                        s("Get the current weather in a given location"),
                    ),
                    (
                        "parameters",
                        obj(vec![
                            ("type", s("object")),
                            (
                                "properties",
                                obj(vec![
                                    (
                                        "location",
                                        obj(vec![
                                            ("type", s("string")),
                                            (
                                                "description",
                                                s("The city and state, e.g. San Francisco, CA"),
                                            ),
                                        ]),
                                    ),
                                    (
                                        "unit",
                                        obj(vec![
                                            ("type", s("string")),
                                            ("description", s("The unit of temperature to return")),
                                            (
                                                "enum",
                                                Json::Array(vec![s("celsius"), s("fahrenheit")]),
                                            ),
                                        ]),
                                    ),
                                ]),
                            ),
                            ("required", Json::Array(vec![s("location")])),
                        ]),
                    ),
                ]),
            ),
        ])];
        let tools = refs(&tools);
        let messages = vec![
            obj(vec![
                ("role", s("system")),
                (
                    "content",
                    s(
                        "You are a helpful assistant that can answer to questions about the weather.",
                    ),
                ),
            ]),
            obj(vec![
                ("role", s("user")),
                ("content", s("What's the weather like in San Francisco?")),
            ]),
        ];
        let messages = refs(&messages);
        let cl100k = Tokenizer::new(Encoding::Cl100kBase);
        let o200k = Tokenizer::new(Encoding::O200kBase);
        assert_eq!(cl100k.count_messages(&messages, Some(&tools[..])), Ok(105));
        assert_eq!(o200k.count_messages(&messages, Some(&tools[..])), Ok(101));
    }

    #[test]
    fn errors_name_the_field() {
        let tok = Tokenizer::new(Encoding::O200kBase);
        let messages = vec![
            obj(vec![("role", s("user")), ("content", s("hi"))]),
            obj(vec![
                ("role", s("user")),
                ("content", Json::Number("3".into())),
            ]),
        ];
        let messages = refs(&messages);
        let err = tok.count_messages(&messages, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "messages[1].content: expected str, a list of content blocks, or None, got number"
        );
        let err = tok
            .count_message(&&obj(vec![("content", s("x"))]))
            .unwrap_err();
        assert_eq!(err.to_string(), "role: required field is missing");
        let blocks = obj(vec![
            ("role", s("user")),
            ("content", Json::Array(vec![obj(vec![("type", s("text"))])])),
        ]);
        assert_eq!(
            tok.count_message(&&blocks).unwrap_err().to_string(),
            "content[0].text: required field is missing"
        );
    }
}
