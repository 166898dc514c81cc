//! Python arguments to Rust values, with our own clear errors (pyo3's default
//! extraction errors are plain `TypeError`s, not `ContextCoreError`s).

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::errors::{invalid_input, invalid_type};

/// The UTF-8 of a Python `str`, borrowed from the string object (no copy). A
/// string holding lone surrogates has no UTF-8; like tiktoken we then round-trip
/// it through UTF-16 with `surrogatepass`/`replace`, which joins valid
/// surrogate pairs and turns each lone surrogate into U+FFFD.
pub fn str_text<'a>(s: &'a Bound<'_, PyString>) -> Cow<'a, str> {
    if let Ok(text) = s.to_str() {
        return Cow::Borrowed(text);
    }
    let repaired = s
        .call_method1("encode", ("utf-16", "surrogatepass"))
        .and_then(|b| b.call_method1("decode", ("utf-16", "replace")));
    match repaired.as_ref().map(|r| r.cast::<PyString>()) {
        Ok(Ok(text)) => Cow::Owned(text.to_string_lossy().into_owned()),
        _ => Cow::Owned(s.to_string_lossy().into_owned()),
    }
}

/// `obj` as a `str`, or a clear `TypeError` naming `what`.
pub fn as_str<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    what: &str,
) -> PyResult<&'a Bound<'py, PyString>> {
    obj.cast::<PyString>()
        .map_err(|_| invalid_type(format!("{what} must be str, not {}", type_name(obj))))
}

/// `obj` as the text of a `str`, or a clear `TypeError` naming `what`.
pub fn text<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, str>> {
    as_str(obj, what).map(str_text)
}

/// `obj` as a non-negative integer, or a clear error naming `what`. Integers
/// beyond the machine's range saturate: a limit of 2**70 means "no limit".
pub fn as_count(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let refuse = || invalid_type(format!("{what} must be int, not {}", type_name(obj)));
    if obj.is_instance_of::<PyBool>() {
        return Err(refuse());
    }
    // Any integer type (`__index__`: numpy's too), read as an int.
    let number = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else if obj.get_type().hasattr("__index__")? {
        obj.call_method0("__index__").map_err(|_| refuse())?
    } else {
        return Err(refuse());
    };
    if number.lt(0)? {
        return Err(invalid_input(format!(
            "{what} must be a non-negative int, got {number}"
        )));
    }
    Ok(number.extract::<usize>().unwrap_or(usize::MAX))
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |name| name.to_string())
}

/// The items of a list, tuple or other iterable (a generator, a numpy array, a
/// pandas Series), or a clear `TypeError` naming `what`. A `str`, `bytes` or
/// `dict` is refused: iterating one is never what the caller meant.
pub fn sequence<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = obj.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return Ok(tuple.iter().collect());
    }
    let refused = obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyBytes>()
        || obj.is_instance_of::<PyDict>();
    let not_a_sequence = || {
        invalid_type(format!(
            "{what} must be a list, tuple or other iterable, not {}",
            type_name(obj)
        ))
    };
    if refused {
        return Err(not_a_sequence());
    }
    let iterator = obj.try_iter().map_err(|_| not_a_sequence())?;
    iterator.collect()
}
