//! JSON-shaped values: chat messages and tool schemas as the core reads them.
//!
//! The core reads messages through the [`JsonValue`] trait rather than one
//! concrete type, so the binding can let it walk the caller's Python dicts in
//! place: no tree is built and no string is copied on the hot path. [`Json`] is
//! the plain Rust implementation (tests, Rust callers).

use std::borrow::Cow;
use std::fmt::Write;

use crate::error::{Error, Result};

pub use crate::limits::MAX_DEPTH;

/// What kind of JSON value something is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Null,
    Bool(bool),
    Number,
    String,
    Array,
    Object,
    /// Not representable as JSON (a set, bytes, an arbitrary object...).
    Unsupported,
}

/// Read access to a JSON-shaped value.
/// The error for a value of the wrong type at `path` (the one place every
/// reader of messages and schemas makes it).
pub(crate) fn wrong_type<J: JsonValue>(path: &str, expected: &'static str, found: &J) -> Error {
    Error::WrongType {
        path: path.to_owned(),
        expected,
        found: found.type_name().into_owned(),
    }
}

pub trait JsonValue: Sized {
    fn kind(&self) -> Kind;
    /// The value's type name, for error messages (e.g. `int`, `set`).
    fn type_name(&self) -> Cow<'_, str>;
    /// The text of a string value.
    fn as_str(&self) -> Option<Cow<'_, str>>;
    /// [`JsonValue::as_str`] where the text must be the string itself: an
    /// error if the value had to be changed to be text (a Python `str`
    /// holding a lone surrogate, which has no UTF-8).
    fn as_str_exact(&self) -> Result<Option<Cow<'_, str>>> {
        Ok(self.as_str())
    }
    /// The JSON literal of a number value (`3`, `1e-05`, `NaN`); an error for
    /// a number that cannot be written out.
    fn number_literal(&self) -> Result<Cow<'_, str>>;
    /// A number value as the nearest `f64` to its literal (an error where
    /// [`JsonValue::number_literal`] is one, or the literal is no number).
    fn as_f64(&self) -> Result<f64> {
        let literal = self.number_literal()?;
        literal.parse::<f64>().map_err(|_| Error::WrongType {
            path: String::new(),
            expected: "a finite number",
            found: literal.into_owned(),
        })
    }
    /// The value of `key` in an object.
    fn get(&self, key: &'static str) -> Option<Self>;
    /// Number of elements of an array or entries of an object.
    fn len(&self) -> usize;
    /// Whether an array or object has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The count and tag cache key of a string value's text:
    /// [`text_key`](crate::text_key).
    fn text_key(&self) -> Option<u128> {
        self.as_str().map(|text| crate::cache::text_key(&text))
    }
    /// Elements of an array.
    fn items(&self) -> impl Iterator<Item = Self>;
    /// `(key, value)` entries of an object, in order.
    fn entries(&self) -> impl Iterator<Item = (Self, Self)>;

    /// The values of `names` in an object (`None` where absent), found in
    /// one pass over its entries: cheaper than a lookup per name when most
    /// names are absent, as selection metadata usually is.
    fn pick<const N: usize>(&self, names: &[&str; N]) -> [Option<Self>; N] {
        let mut found: [Option<Self>; N] = std::array::from_fn(|_| None);
        for (key, value) in self.entries() {
            let Some(key) = key.as_str() else { continue };
            if let Some(slot) = names.iter().position(|name| *name == key.as_ref()) {
                found[slot] = Some(value);
            }
        }
        found
    }

    /// Compact JSON text, as Python's
    /// `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` writes it.
    fn to_compact(&self) -> Result<String> {
        let mut out = String::new();
        write_compact(self, &mut out, 0, false)?;
        Ok(out)
    }

    /// [`JsonValue::to_compact`] of a value that must read back as itself:
    /// refuses what JSON would change (a tuple, a key that is not a string).
    fn to_compact_exact(&self) -> Result<String> {
        // Most messages fit: no regrowth on the way.
        let mut out = String::with_capacity(256);
        write_compact(self, &mut out, 0, true)?;
        Ok(out)
    }

    /// Whether an array reads back from JSON as the same type (a Python
    /// tuple comes back as a list).
    fn is_plain_array(&self) -> bool {
        true
    }
}

fn write_compact<J: JsonValue>(
    value: &J,
    out: &mut String,
    depth: usize,
    exact: bool,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    match value.kind() {
        Kind::Null => out.push_str("null"),
        Kind::Bool(true) => out.push_str("true"),
        Kind::Bool(false) => out.push_str("false"),
        Kind::Number => out.push_str(&value.number_literal()?),
        Kind::String if exact => write_string(&value.as_str_exact()?.unwrap_or_default(), out),
        Kind::String => write_string(&value.as_str().unwrap_or_default(), out),
        Kind::Array => {
            if exact && !value.is_plain_array() {
                return Err(Error::WrongType {
                    path: String::new(),
                    expected: "a list (a tuple would come back as a list)",
                    found: value.type_name().into_owned(),
                });
            }
            out.push('[');
            for (i, item) in value.items().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(&item, out, depth + 1, exact)
                    .map_err(|e| e.within(&format!("[{i}]")))?;
            }
            out.push(']');
        }
        Kind::Object => {
            out.push('{');
            for (i, (key, item)) in value.entries().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if exact && key.kind() != Kind::String {
                    return Err(Error::WrongType {
                        path: String::new(),
                        expected: "str keys (JSON would turn this key into a string)",
                        found: key.type_name().into_owned(),
                    });
                }
                let key_text = if exact {
                    key.as_str_exact()?.unwrap_or_default()
                } else {
                    key_text(&key)?
                };
                write_string(&key_text, out);
                out.push(':');
                write_compact(&item, out, depth + 1, exact).map_err(|e| e.within(&key_text))?;
            }
            out.push('}');
        }
        Kind::Unsupported => {
            return Err(Error::WrongType {
                path: String::new(),
                expected: "a JSON value (dict, list, str, int, float, bool or None)",
                found: value.type_name().into_owned(),
            });
        }
    }
    Ok(())
}

/// An object key as text: `json.dumps` turns str, int, float, bool and None
/// keys into strings and refuses the rest.
pub fn key_text<J: JsonValue>(key: &J) -> Result<Cow<'_, str>> {
    match key.kind() {
        Kind::String => Ok(key.as_str().unwrap_or_default()),
        Kind::Number => key.number_literal(),
        Kind::Bool(b) => Ok(Cow::Borrowed(if b { "true" } else { "false" })),
        Kind::Null => Ok(Cow::Borrowed("null")),
        _ => Err(Error::WrongType {
            path: String::new(),
            expected: "dict keys of type str, int, float, bool or None",
            found: key.type_name().into_owned(),
        }),
    }
}

fn too_deep() -> Error {
    Error::TooDeep {
        path: String::new(),
    }
}

/// A JSON string literal with the escapes of Python's `json` (`ensure_ascii=False`).
/// `s` as a JSON string literal (as `json.dumps(s, ensure_ascii=False)` writes it).
pub(crate) fn write_json_string(s: &str, out: &mut String) {
    write_string(s, out);
}

fn write_string(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Copy runs that need no escape whole: only quotes, backslashes and
    // control characters do, and they are all ASCII.
    let bytes = s.as_bytes();
    let mut run = 0;
    while let Some(i) = next_escape(bytes, run) {
        out.push_str(&s[run..i]);
        let b = bytes[i];
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0C => out.push_str("\\f"),
            _ => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The first byte at or after `from` that needs an escape. Whole blocks are
/// tested first with a branch-free fold the compiler vectorises: most text
/// has no escape at all.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const BLOCK: usize = 32;
    let mut at = from;
    while let Some(block) = bytes.get(at..at + BLOCK) {
        if block.iter().fold(false, |any, &b| any | needs_escape(b)) {
            break;
        }
        at += BLOCK;
    }
    bytes[at..]
        .iter()
        .position(|&b| needs_escape(b))
        .map(|i| at + i)
}

/// An owned (or borrowed-string) JSON tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// A number as its JSON literal text.
    Number(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Entries in insertion order. Keys are values too, as in a Python dict;
    /// serialisation accepts the key types `json.dumps` accepts.
    Object(Vec<(Json<'a>, Json<'a>)>),
}

impl Json<'static> {
    /// An owned copy of `value`, adding the length of its strings to
    /// `text_bytes`; `None` where the copy might not read as the source does:
    /// an array that is not plain (a tuple), a value JSON cannot hold, a
    /// number with no literal, nesting deeper than serialisation allows.
    pub fn copy_of<J: JsonValue>(value: &J, text_bytes: &mut usize) -> Option<Self> {
        copy(value, text_bytes, 0)
    }
}

fn copy<J: JsonValue>(value: &J, text_bytes: &mut usize, depth: usize) -> Option<Json<'static>> {
    if depth > MAX_DEPTH {
        return None;
    }
    Some(match value.kind() {
        Kind::Null => Json::Null,
        Kind::Bool(b) => Json::Bool(b),
        Kind::Number => Json::Number(Cow::Owned(value.number_literal().ok()?.into_owned())),
        Kind::String => {
            // Exact: a text Python had to repair is left to the serial path.
            let text = value.as_str_exact().ok()??.into_owned();
            *text_bytes += text.len();
            Json::String(Cow::Owned(text))
        }
        Kind::Array if value.is_plain_array() => Json::Array(
            value
                .items()
                .map(|item| copy(&item, text_bytes, depth + 1))
                .collect::<Option<_>>()?,
        ),
        Kind::Object => Json::Object(
            value
                .entries()
                .map(|(key, item)| {
                    Some((
                        copy(&key, text_bytes, depth + 1)?,
                        copy(&item, text_bytes, depth + 1)?,
                    ))
                })
                .collect::<Option<_>>()?,
        ),
        Kind::Array | Kind::Unsupported => return None,
    })
}

impl<'j, 'a> JsonValue for &'j Json<'a> {
    fn kind(&self) -> Kind {
        match self {
            Json::Null => Kind::Null,
            Json::Bool(b) => Kind::Bool(*b),
            Json::Number(_) => Kind::Number,
            Json::String(_) => Kind::String,
            Json::Array(_) => Kind::Array,
            Json::Object(_) => Kind::Object,
        }
    }

    fn type_name(&self) -> Cow<'_, str> {
        Cow::Borrowed(match self {
            Json::Null => "None",
            Json::Bool(_) => "bool",
            Json::Number(_) => "number",
            Json::String(_) => "str",
            Json::Array(_) => "list",
            Json::Object(_) => "dict",
        })
    }

    fn as_str(&self) -> Option<Cow<'_, str>> {
        match self {
            Json::String(s) => Some(Cow::Borrowed(s)),
            _ => None,
        }
    }

    fn number_literal(&self) -> Result<Cow<'_, str>> {
        match self {
            Json::Number(n) => Ok(Cow::Borrowed(n)),
            other => Err(Error::WrongType {
                path: String::new(),
                expected: "a number",
                found: other.type_name().into_owned(),
            }),
        }
    }

    fn get(&self, key: &'static str) -> Option<Self> {
        match self {
            Json::Object(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Json::String(k) if k == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Json::Array(items) => items.len(),
            Json::Object(entries) => entries.len(),
            _ => 0,
        }
    }

    fn items(&self) -> impl Iterator<Item = Self> {
        let items: &'j [Json<'a>] = match self {
            Json::Array(items) => items,
            _ => &[],
        };
        items.iter()
    }

    fn entries(&self) -> impl Iterator<Item = (Self, Self)> {
        let entries: &'j [(Json<'a>, Json<'a>)] = match self {
            Json::Object(entries) => entries,
            _ => &[],
        };
        entries.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Json<'_> {
        Json::String(text.into())
    }

    #[test]
    fn compact_matches_python_json_dumps() {
        let value = Json::Object(vec![
            (key("city"), Json::String("São Paulo \"SP\"\n\u{1}".into())),
            (key("days"), Json::Number("3".into())),
            (key("ratio"), Json::Number("1e-05".into())),
            (
                key("flags"),
                Json::Array(vec![Json::Bool(true), Json::Null, Json::Bool(false)]),
            ),
        ]);
        assert_eq!(
            (&value).to_compact().unwrap(),
            r#"{"city":"São Paulo \"SP\"\n\u0001","days":3,"ratio":1e-05,"flags":[true,null,false]}"#
        );
    }

    /// `json.dumps(s, ensure_ascii=False)`, one character at a time.
    fn escaped_by_definition(s: &str) -> String {
        let mut out = String::from('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn escapes_are_found_anywhere_in_a_block() {
        // Every escape at every offset around the 32-byte blocks, in ASCII
        // and in multi-byte text, alone and in pairs.
        for filler in ["abcdefgh", "ünï€日本語"] {
            let base: String = filler.chars().cycle().take(70).collect();
            let offsets: Vec<usize> = base.char_indices().map(|(i, _)| i).collect();
            for special in [
                "\"", "\\", "\n", "\u{0}", "\u{1f}", "\u{8}", "\u{c}", "\u{7f}",
            ] {
                for &at in &offsets {
                    for &second in [at, base.len()].iter().chain(offsets.iter().step_by(7)) {
                        let mut text = base.clone();
                        text.insert_str(second.max(at), special);
                        text.insert_str(at, special);
                        let mut out = String::new();
                        write_string(&text, &mut out);
                        assert_eq!(out, escaped_by_definition(&text), "{text:?}");
                    }
                }
            }
        }
    }
}
