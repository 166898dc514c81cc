//! Chat accounting: what a list of messages (and tool schemas) costs in tokens.
//!
//! Messages follow OpenAI's published formula (the "How to count tokens with
//! tiktoken" cookbook): 3 tokens a message for its framing, the tokens of its
//! role and text, 1 more for a `name`, and 3 at the end to prime the reply. That
//! formula reproduces the API's own `prompt_tokens` for the cookbook's examples,
//! which the test suite checks. The same rules are extended, and documented in
//! README.md, to the parts the cookbook does not cover: content parts, tool
//! calls, and Anthropic blocks (text, tool_use, tool_result, thinking, images).
//! Every text goes through the count cache, so recounting an unchanged history
//! costs hashing, not BPE.

use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::json::Json;
use crate::tokenizer::Tokenizer;

/// Framing of every message (`<|start|>{role}<|message|>…<|end|>`).
pub const TOKENS_PER_MESSAGE: usize = 3;
/// Extra cost of a `name` field.
pub const TOKENS_PER_NAME: usize = 1;
/// Every reply is primed with `<|start|>assistant<|message|>`.
pub const REPLY_PRIMING: usize = 3;
/// Framing of one tool call or tool_use / tool_result block.
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

impl Tokenizer {
    /// Tokens of one message, without the reply priming.
    pub fn count_message(&self, message: &Json) -> Result<usize> {
        let Json::Object(_) = message else {
            return Err(wrong_type("", "a message dict", message));
        };
        let role = message.get("role").ok_or_else(|| missing("role"))?;
        let role = role
            .as_str()
            .ok_or_else(|| wrong_type("role", "str", role))?;
        let mut total = TOKENS_PER_MESSAGE + self.count_cached(role);
        if let Some(name) = present(message.get("name")) {
            let name = name
                .as_str()
                .ok_or_else(|| wrong_type("name", "str", name))?;
            total += self.count_cached(name) + TOKENS_PER_NAME;
        }
        if let Some(content) = present(message.get("content")) {
            total += self
                .content_tokens(content)
                .map_err(|e| e.within("content"))?;
        }
        if let Some(refusal) = present(message.get("refusal")) {
            let refusal = refusal
                .as_str()
                .ok_or_else(|| wrong_type("refusal", "str", refusal))?;
            total += self.count_cached(refusal);
        }
        if let Some(calls) = present(message.get("tool_calls")) {
            let Json::Array(calls) = calls else {
                return Err(wrong_type("tool_calls", "a list of tool calls", calls));
            };
            for (i, call) in calls.iter().enumerate() {
                total += self
                    .tool_call_tokens(call)
                    .map_err(|e| e.within(&format!("tool_calls[{i}]")))?;
            }
        }
        if let Some(call) = present(message.get("function_call")) {
            total += self
                .function_tokens(call)
                .map_err(|e| e.within("function_call"))?;
        }
        Ok(total)
    }

    /// Tokens of a whole request: every message, the reply priming, and the
    /// tool schemas if any.
    pub fn count_messages(&self, messages: &[Json], tools: Option<&[Json]>) -> Result<usize> {
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
    pub fn count_tools(&self, tools: &[Json]) -> Result<usize> {
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

    fn content_tokens(&self, content: &Json) -> Result<usize> {
        match content {
            Json::String(text) => Ok(self.count_cached(text)),
            Json::Array(blocks) => blocks.iter().enumerate().try_fold(0, |sum, (i, block)| {
                self.block_tokens(block)
                    .map(|n| sum + n)
                    .map_err(|e| e.within(&format!("[{i}]")))
            }),
            other => Err(wrong_type(
                "",
                "str, a list of content blocks, or None",
                other,
            )),
        }
    }

    fn block_tokens(&self, block: &Json) -> Result<usize> {
        let Json::Object(_) = block else {
            return match block {
                Json::String(text) => Ok(self.count_cached(text)),
                other => Err(wrong_type("", "a content block dict or str", other)),
            };
        };
        let kind = block.get("type").ok_or_else(|| missing("type"))?;
        let kind = kind
            .as_str()
            .ok_or_else(|| wrong_type("type", "str", kind))?;
        let text_of = |field: &'static str| -> Result<usize> {
            let value = block.get(field).ok_or_else(|| missing(field))?;
            let text = value
                .as_str()
                .ok_or_else(|| wrong_type(field, "str", value))?;
            Ok(self.count_cached(text))
        };
        match kind {
            "text" | "input_text" | "output_text" => text_of("text"),
            "refusal" => text_of("refusal"),
            "thinking" => text_of("thinking"),
            "redacted_thinking" => text_of("data"),
            "image_url" | "input_image" => {
                let detail = block
                    .get("image_url")
                    .and_then(|url| url.get("detail"))
                    .or_else(|| block.get("detail"))
                    .and_then(Json::as_str);
                Ok(if detail == Some("low") {
                    IMAGE_TOKENS_LOW
                } else {
                    IMAGE_TOKENS
                })
            }
            "image" => Ok(ANTHROPIC_IMAGE_TOKENS),
            "tool_use" | "server_tool_use" => {
                let name = text_of("name")?;
                let input = present(block.get("input"))
                    .map_or(0, |input| self.count_cached(&input.to_compact()));
                Ok(TOKENS_PER_TOOL_CALL + name + input)
            }
            kind if kind == "tool_result" || kind.ends_with("_tool_result") => {
                let content = present(block.get("content"))
                    .map(|c| self.content_tokens(c).map_err(|e| e.within("content")))
                    .transpose()?;
                Ok(TOKENS_PER_TOOL_CALL + content.unwrap_or(0))
            }
            _ => Ok(self.count_cached(&block.to_compact())),
        }
    }

    fn tool_call_tokens(&self, call: &Json) -> Result<usize> {
        let Json::Object(_) = call else {
            return Err(wrong_type("", "a tool call dict", call));
        };
        let function = call.get("function").ok_or_else(|| missing("function"))?;
        self.function_tokens(function)
            .map_err(|e| e.within("function"))
    }

    /// `{"name": ..., "arguments": ...}` of a tool call or legacy function call.
    fn function_tokens(&self, function: &Json) -> Result<usize> {
        let Json::Object(_) = function else {
            return Err(wrong_type("", "a dict with name and arguments", function));
        };
        let name = function.get("name").ok_or_else(|| missing("name"))?;
        let name = name
            .as_str()
            .ok_or_else(|| wrong_type("name", "str", name))?;
        let arguments = match present(function.get("arguments")) {
            None => 0,
            Some(Json::String(text)) => self.count_cached(text),
            Some(other) => self.count_cached(&other.to_compact()),
        };
        Ok(TOKENS_PER_TOOL_CALL + self.count_cached(name) + arguments)
    }

    fn tool_schema_tokens(&self, tool: &Json, costs: &ToolCosts) -> Result<isize> {
        let Json::Object(_) = tool else {
            return Err(wrong_type("", "a tool dict", tool));
        };
        let (function, at) = match tool.get("function") {
            Some(function) => (function, "function."),
            None => (tool, ""),
        };
        let name = function
            .get("name")
            .ok_or_else(|| missing(&format!("{at}name")))?;
        let name = name
            .as_str()
            .ok_or_else(|| wrong_type(&format!("{at}name"), "str", name))?;
        let description = optional_str(function, "description")
            .map_err(|e| e.within(at.trim_end_matches('.')))?;
        let mut total = costs.func_init
            + self.count_cached(&format!("{name}:{}", strip_final_dot(description))) as isize;
        let schema = function
            .get("parameters")
            .or_else(|| function.get("input_schema"));
        if let Some(schema) = schema {
            total += self.properties_tokens(schema, costs)?;
        }
        Ok(total)
    }

    /// `prop_init` plus each property of an object schema (recursively), if any.
    fn properties_tokens(&self, schema: &Json, costs: &ToolCosts) -> Result<isize> {
        let Some(Json::Object(properties)) = schema.get("properties") else {
            return Ok(0);
        };
        if properties.is_empty() {
            return Ok(0);
        }
        let mut total = costs.prop_init;
        for (key, property) in properties {
            total += costs.prop_key;
            if let Some(Json::Array(items)) = property.get("enum") {
                total += costs.enum_init;
                for item in items {
                    let text = match item {
                        Json::String(s) => self.count_cached(s),
                        other => self.count_cached(&other.to_compact()),
                    };
                    total += costs.enum_item + text as isize;
                }
            }
            let kind = type_label(property);
            let description = optional_str(property, "description")?;
            total += self.count_cached(&format!("{key}:{kind}:{}", strip_final_dot(description)))
                as isize;
            total += self.properties_tokens(property, costs)?;
            if let Some(items) = property.get("items") {
                total += self.properties_tokens(items, costs)?;
            }
        }
        Ok(total)
    }
}

/// `value` unless it is absent or JSON null.
fn present<'v, 'a>(value: Option<&'v Json<'a>>) -> Option<&'v Json<'a>> {
    value.filter(|v| !matches!(v, Json::Null))
}

fn optional_str<'v>(object: &'v Json, key: &str) -> Result<&'v str> {
    match present(object.get(key)) {
        None => Ok(""),
        Some(Json::String(s)) => Ok(s),
        Some(other) => Err(wrong_type(key, "str", other)),
    }
}

/// A property's `type`: the string, a list joined with `" | "`, else `"any"`.
fn type_label(property: &Json) -> String {
    match property.get("type") {
        Some(Json::String(kind)) => kind.to_string(),
        Some(Json::Array(kinds)) => kinds
            .iter()
            .map(|k| k.as_str().map_or_else(|| k.to_compact(), str::to_owned))
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "any".to_owned(),
    }
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

fn wrong_type(path: &str, expected: &'static str, found: &Json) -> Error {
    Error::WrongType {
        path: path.to_owned(),
        expected,
        found: found.type_name().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Json<'_> {
        Json::String(text.into())
    }

    fn obj<'a>(entries: Vec<(&'a str, Json<'a>)>) -> Json<'a> {
        Json::Object(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
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
        let messages = cookbook_messages();
        let cl100k = Tokenizer::new(Encoding::Cl100kBase);
        let o200k = Tokenizer::new(Encoding::O200kBase);
        assert_eq!(cl100k.count_messages(&messages, None), Ok(129));
        assert_eq!(o200k.count_messages(&messages, None), Ok(124));
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
        let cl100k = Tokenizer::new(Encoding::Cl100kBase);
        let o200k = Tokenizer::new(Encoding::O200kBase);
        assert_eq!(cl100k.count_messages(&messages, Some(&tools)), Ok(105));
        assert_eq!(o200k.count_messages(&messages, Some(&tools)), Ok(101));
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
        let err = tok.count_messages(&messages, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "messages[1].content: expected str, a list of content blocks, or None, got number"
        );
        let err = tok
            .count_message(&obj(vec![("content", s("x"))]))
            .unwrap_err();
        assert_eq!(err.to_string(), "role: required field is missing");
        let blocks = obj(vec![
            ("role", s("user")),
            ("content", Json::Array(vec![obj(vec![("type", s("text"))])])),
        ]);
        assert_eq!(
            tok.count_message(&blocks).unwrap_err().to_string(),
            "content[0].text: required field is missing"
        );
    }
}
