//! Python values seen as JSON by the core, in place: the core's chat accounting
//! walks the caller's dicts through this view without building a tree or
//! copying a string.

use std::borrow::Cow;

use context_core::{Error, JsonKind, JsonValue};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::text::{str_text, type_name};

/// A Python object read as a JSON value.
pub struct PyJson<'py>(pub Bound<'py, PyAny>);

/// Interned key objects for the keys the core asks for, so a lookup does not
/// build a new `str` (and hash it) every time.
macro_rules! key_object {
    ($py:expr, $key:expr, [$($name:literal),* $(,)?]) => {
        match $key {
            $($name => intern!($py, $name).clone(),)*
            other => PyString::new($py, other),
        }
    };
}

impl JsonValue for PyJson<'_> {
    fn kind(&self) -> JsonKind {
        let obj = &self.0;
        if obj.is_instance_of::<PyString>() {
            JsonKind::String
        } else if obj.is_instance_of::<PyDict>() {
            JsonKind::Object
        } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
            JsonKind::Array
        } else if obj.is_none() {
            JsonKind::Null
        } else if obj.is_instance_of::<PyBool>() {
            JsonKind::Bool(obj.is_truthy().unwrap_or(false))
        } else if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyFloat>() {
            JsonKind::Number
        } else {
            JsonKind::Unsupported
        }
    }

    fn type_name(&self) -> Cow<'_, str> {
        Cow::Owned(type_name(&self.0))
    }

    fn as_str(&self) -> Option<Cow<'_, str>> {
        self.0.cast::<PyString>().ok().map(str_text)
    }

    /// A lone surrogate is refused rather than stored as U+FFFD: a log must
    /// give back the caller's text, not a repaired copy of it.
    fn as_str_exact(&self) -> context_core::Result<Option<Cow<'_, str>>> {
        let Ok(text) = self.0.cast::<PyString>() else {
            return Ok(None);
        };
        match text.to_str() {
            Ok(text) => Ok(Some(Cow::Borrowed(text))),
            Err(_) => Err(Error::InvalidValue {
                path: String::new(),
                reason: "a string holds a lone surrogate (not valid Unicode), so it cannot be \
                         stored as it is"
                    .into(),
            }),
        }
    }

    /// The key of a long string is remembered by the string's identity
    /// (see `key_memo`): the same history every turn is not hashed again.
    fn text_key(&self) -> Option<u128> {
        let string = self.0.cast::<PyString>().ok()?;
        Some(crate::key_memo::key_of(string, &str_text(string)))
    }

    fn is_plain_array(&self) -> bool {
        !self.0.is_instance_of::<PyTuple>()
    }

    /// A float's own value, and a machine-sized int's, without writing the
    /// literal out (a timestamp per message, every turn, was mostly `repr`).
    fn as_f64(&self) -> context_core::Result<f64> {
        if let Ok(float) = self.0.cast::<PyFloat>() {
            return Ok(float.value());
        }
        if self.0.is_instance_of::<PyInt>()
            && !self.0.is_instance_of::<PyBool>()
            && let Ok(small) = self.0.extract::<i64>()
        {
            #[allow(clippy::cast_precision_loss)]
            // rounds to nearest, as parsing the literal does
            return Ok(small as f64);
        }
        let literal = self.number_literal()?;
        literal.parse::<f64>().map_err(|_| Error::WrongType {
            path: String::new(),
            expected: "a finite number",
            found: literal.into_owned(),
        })
    }

    /// Numbers as `json.dumps` writes them: `int.__repr__` and `float.__repr__`
    /// of the value (never a subclass's own methods, so no user code runs),
    /// and `NaN` / `Infinity` / `-Infinity` for the non-finite floats.
    fn number_literal(&self) -> context_core::Result<Cow<'_, str>> {
        let obj = &self.0;
        let py = obj.py();
        let unusable = |reason: String| Error::InvalidValue {
            path: String::new(),
            reason,
        };
        if let Ok(float) = obj.cast::<PyFloat>() {
            let value = float.value();
            let literal = if value.is_nan() {
                "NaN".to_owned()
            } else if value.is_infinite() {
                if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else {
                // Python's shortest round-trip repr of the exact float value.
                let repr = PyFloat::new(py, value).repr();
                repr.map_err(|e| unusable(e.to_string()))?.to_string()
            };
            return Ok(Cow::Owned(literal));
        }
        if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
            if let Ok(small) = obj.extract::<i64>() {
                return Ok(Cow::Owned(small.to_string()));
            }
            // int.__repr__ on the value: a huge int is refused here exactly as
            // json.dumps refuses it (Python's limit on int-to-str digits).
            let repr = py
                .get_type::<PyInt>()
                .call_method1(intern!(py, "__repr__"), (obj,))
                .map_err(|e| unusable(e.value(py).to_string()))?;
            return Ok(Cow::Owned(repr.to_string()));
        }
        Err(Error::WrongType {
            path: String::new(),
            expected: "a number",
            found: type_name(obj),
        })
    }

    fn get(&self, key: &'static str) -> Option<Self> {
        let dict = self.0.cast::<PyDict>().ok()?;
        let py = dict.py();
        let key = key_object!(
            py,
            key,
            [
                "role",
                "name",
                "content",
                "refusal",
                "tool_calls",
                "function_call",
                "function",
                "arguments",
                "type",
                "text",
                "thinking",
                "data",
                "image_url",
                "detail",
                "input",
                "parameters",
                "input_schema",
                "properties",
                "description",
                "enum",
                "items",
                "tool_call_id",
                "id",
                "tool_use_id",
                // selection metadata, looked up on every message each turn
                "pinned",
                "priority",
                "weight",
                "tags",
                "timestamp",
                "depends_on",
            ]
        );
        dict.get_item(key).ok().flatten().map(PyJson)
    }

    /// The container's own size (not a subclass's `__len__`).
    fn len(&self) -> usize {
        if let Ok(dict) = self.0.cast::<PyDict>() {
            dict.len()
        } else if let Ok(list) = self.0.cast::<PyList>() {
            list.len()
        } else if let Ok(tuple) = self.0.cast::<PyTuple>() {
            tuple.len()
        } else {
            0
        }
    }

    fn items(&self) -> impl Iterator<Item = Self> {
        let list = self.0.cast::<PyList>().ok().cloned();
        let tuple = self.0.cast::<PyTuple>().ok().cloned();
        let len = list.as_ref().map_or(0, PyListMethods::len)
            + tuple.as_ref().map_or(0, PyTupleMethods::len);
        (0..len).filter_map(move |i| {
            let item = match (&list, &tuple) {
                (Some(list), _) => list.get_item(i).ok()?,
                (_, Some(tuple)) => tuple.get_item(i).ok()?,
                _ => return None,
            };
            Some(PyJson(item))
        })
    }

    /// Entries from a snapshot of the dict's items, so nothing that runs
    /// meanwhile can change the dict under the walk.
    fn entries(&self) -> impl Iterator<Item = (Self, Self)> {
        // PyDict_Next: no list of item tuples is built.
        let dict = self.0.cast::<PyDict>().ok().cloned();
        dict.into_iter()
            .flat_map(|dict| dict.into_iter().map(|(k, v)| (PyJson(k), PyJson(v))))
    }
}
