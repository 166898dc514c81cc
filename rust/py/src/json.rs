//! Python values seen as JSON by the core, in place: the core's chat accounting
//! walks the caller's dicts through this view without building a tree or
//! copying a string.

use std::borrow::Cow;

use context_core::{JsonKind, JsonValue};
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

    /// Numbers as `json.dumps` writes them: `int.__repr__`, `float.__repr__`,
    /// and `NaN` / `Infinity` / `-Infinity` for the non-finite floats.
    fn number_literal(&self) -> Option<Cow<'_, str>> {
        let obj = &self.0;
        if obj.is_instance_of::<PyBool>() {
            return None;
        }
        if let Ok(float) = obj.cast::<PyFloat>() {
            let value = float.value();
            let literal = if value.is_nan() {
                "NaN".to_owned()
            } else if value.is_infinite() {
                if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
            } else {
                // Python's shortest round-trip repr of the exact float value.
                PyFloat::new(obj.py(), value).repr().ok()?.to_string()
            };
            return Some(Cow::Owned(literal));
        }
        if obj.is_instance_of::<PyInt>() {
            if let Ok(small) = obj.extract::<i64>() {
                return Some(Cow::Owned(small.to_string()));
            }
            let exact = obj.call_method0(intern!(obj.py(), "__index__")).ok()?;
            return Some(Cow::Owned(exact.repr().ok()?.to_string()));
        }
        None
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
            ]
        );
        dict.get_item(key).ok().flatten().map(PyJson)
    }

    fn len(&self) -> usize {
        self.0.len().unwrap_or(0)
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

    fn entries(&self) -> impl Iterator<Item = (Self, Self)> {
        self.0
            .cast::<PyDict>()
            .ok()
            .map(PyDictMethods::iter)
            .into_iter()
            .flatten()
            .map(|(key, value)| (PyJson(key), PyJson(value)))
    }
}
