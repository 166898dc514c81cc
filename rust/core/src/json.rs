//! A borrowed JSON value: the shape in which chat messages and tool schemas
//! reach the core (the binding builds it from Python dicts without copying
//! strings), and its compact serialisation.

use std::borrow::Cow;
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// A number as its JSON literal text (the binding writes Python's own
    /// `repr` for floats, so serialisation matches `json.dumps` exactly).
    Number(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Entries in insertion order (Python dicts keep it, and so does the output).
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'a> Json<'a> {
    /// The value of `key` if this is an object holding it.
    pub fn get(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "bool",
            Json::Number(_) => "number",
            Json::String(_) => "str",
            Json::Array(_) => "list",
            Json::Object(_) => "dict",
        }
    }

    /// Compact JSON text, as Python's
    /// `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` writes it.
    pub fn to_compact(&self) -> String {
        let mut out = String::new();
        self.write_compact(&mut out);
        out
    }

    fn write_compact(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Number(literal) => out.push_str(literal),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_compact(out);
                }
                out.push(']');
            }
            Json::Object(entries) => {
                out.push('{');
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    value.write_compact(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string literal with the escapes of Python's `json` (ensure_ascii=False).
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_matches_python_json_dumps() {
        let value = Json::Object(vec![
            (
                "city".into(),
                Json::String("São Paulo \"SP\"\n\u{1}".into()),
            ),
            ("days".into(), Json::Number("3".into())),
            ("ratio".into(), Json::Number("1e-05".into())),
            (
                "flags".into(),
                Json::Array(vec![Json::Bool(true), Json::Null, Json::Bool(false)]),
            ),
        ]);
        assert_eq!(
            value.to_compact(),
            r#"{"city":"São Paulo \"SP\"\n\u0001","days":3,"ratio":1e-05,"flags":[true,null,false]}"#
        );
    }
}
