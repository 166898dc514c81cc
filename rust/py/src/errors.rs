//! The one place core errors become Python exceptions.
//!
//! The exception classes live in `context_core/errors.py` (each subclasses
//! `ContextCoreError` and the matching built-in, which a Rust-defined class
//! cannot do); they are imported once, on first use.

use context_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static INVALID_INPUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNKNOWN_ENCODING: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNKNOWN_MODEL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static OVER_BUDGET: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_CORRUPT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_LOCKED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_CLOSED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_FORKED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_NOT_FOUND: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOG_INDEX: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static STORAGE_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// "No such file or directory" (the same number on every Unix).
const ENOENT: i32 = 2;

fn raise(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    message: String,
) -> PyErr {
    match cell.import(py, "context_core.errors", name) {
        Ok(class) => PyErr::from_type(class.clone(), message),
        Err(import_error) => PyRuntimeError::new_err(format!(
            "{message} (and {name} could not be imported: {import_error})"
        )),
    }
}

/// As [`raise`], with `fields` set on the exception as attributes (what a
/// caller reads instead of parsing the message).
fn raise_with(
    py: Python<'_>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    message: String,
    fields: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let class = match cell.import(py, "context_core.errors", name) {
        Ok(class) => class,
        Err(import_error) => {
            return PyRuntimeError::new_err(format!(
                "{message} (and {name} could not be imported: {import_error})"
            ));
        }
    };
    let made = class.call1((message,)).and_then(|exception| {
        for (field, value) in fields {
            exception.setattr(*field, value)?;
        }
        Ok(exception)
    });
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(error) => error,
    }
}

/// A `LogStorageError` of the OS error's own class (a `PermissionError`
/// too when the OS said so), made by `errors.storage_error`.
fn storage_error(py: Python<'_>, message: &str, errno: Option<i32>, path: String) -> PyErr {
    let made = STORAGE_ERROR
        .import(py, "context_core.errors", "storage_error")
        .and_then(|make| make.call1((message, errno, path)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(import_error) => PyRuntimeError::new_err(format!(
            "{message} (and LogStorageError could not be made: {import_error})"
        )),
    }
}

/// `ValueError`-like: a value the call cannot use.
pub fn invalid_input(message: impl Into<String>) -> PyErr {
    Python::attach(|py| raise(py, &INVALID_INPUT, "InvalidInputError", message.into()))
}

/// `TypeError`-like: an argument of the wrong type.
pub fn invalid_type(message: impl Into<String>) -> PyErr {
    Python::attach(|py| raise(py, &INVALID_TYPE, "InvalidTypeError", message.into()))
}

/// Newtype so `?` converts core errors at the boundary.
pub struct CoreError(pub Error);

impl From<Error> for CoreError {
    fn from(error: Error) -> Self {
        Self(error)
    }
}

/// The core's message, and after it the Python keyword that helps, where
/// one does (the core names no language's syntax).
fn python_message(error: &Error) -> String {
    let message = error.to_string();
    let hint = match error {
        Error::UnknownModel { .. } => {
            ". Pass a fallback encoding (e.g. fallback=\"o200k_base\") to count for it anyway"
        }
        Error::MarkerTooLong { .. } => " (max_tokens)",
        Error::LogLocked { .. } => {
            " (open it readonly=True to read, or pass lock_timeout= to wait)"
        }
        Error::LogForked { .. } => " with readonly=True",
        Error::LogNotFound { .. } => " (pass create=True to make one)",
        _ => "",
    };
    message + hint
}

impl From<CoreError> for PyErr {
    fn from(CoreError(error): CoreError) -> PyErr {
        let message = python_message(&error);
        match error {
            Error::UnknownEncoding { .. } => {
                Python::attach(|py| raise(py, &UNKNOWN_ENCODING, "UnknownEncodingError", message))
            }
            Error::UnknownModel { .. } => {
                Python::attach(|py| raise(py, &UNKNOWN_MODEL, "UnknownModelError", message))
            }
            Error::WrongType { .. } => invalid_type(message),
            Error::InvalidToken { .. }
            | Error::MarkerTooLong { .. }
            | Error::MissingField { .. }
            | Error::TooDeep { .. }
            | Error::InvalidValue { .. } => invalid_input(message),
            Error::OverBudget {
                system,
                pinned,
                current,
                budget,
            } => Python::attach(|py| {
                let sizes = [
                    ("system", system),
                    ("pinned", pinned),
                    ("turn_in_progress", current),
                    ("priming", context_core::REPLY_PRIMING),
                    ("budget", budget),
                ];
                let fields: Vec<_> = sizes
                    .into_iter()
                    .filter_map(|(name, n)| Some((name, n.into_pyobject(py).ok()?.into_any())))
                    .collect();
                raise_with(py, &OVER_BUDGET, "OverBudgetError", message, &fields)
            }),
            Error::LogCorrupt {
                file,
                offset,
                reason,
            } => Python::attach(|py| {
                let fields = [
                    ("file", file.into_pyobject(py).map(Bound::into_any)),
                    ("offset", offset.into_pyobject(py).map(Bound::into_any)),
                    ("reason", reason.into_pyobject(py).map(Bound::into_any)),
                ];
                let fields: Vec<_> = fields
                    .into_iter()
                    .filter_map(|(name, value)| Some((name, value.ok()?)))
                    .collect();
                raise_with(py, &LOG_CORRUPT, "LogCorruptError", message, &fields)
            }),
            Error::LogForked { opened_by, process } => Python::attach(|py| {
                let fields: Vec<_> = [("opened_by", opened_by), ("process", process)]
                    .into_iter()
                    .filter_map(|(name, pid)| Some((name, pid.into_pyobject(py).ok()?.into_any())))
                    .collect();
                raise_with(py, &LOG_FORKED, "LogForkedError", message, &fields)
            }),
            Error::LogLocked { .. } => {
                Python::attach(|py| raise(py, &LOG_LOCKED, "LogLockedError", message))
            }
            Error::LogClosed { .. } => {
                Python::attach(|py| raise(py, &LOG_CLOSED, "LogClosedError", message))
            }
            Error::LogNotFound { path } => Python::attach(|py| {
                let fields: Vec<_> = [
                    ("filename", path.into_pyobject(py).map(Bound::into_any)),
                    ("errno", ENOENT.into_pyobject(py).map(Bound::into_any)),
                    (
                        "strerror",
                        "No such file or directory"
                            .into_pyobject(py)
                            .map(Bound::into_any),
                    ),
                ]
                .into_iter()
                .filter_map(|(name, value)| Some((name, value.ok()?)))
                .collect();
                raise_with(py, &LOG_NOT_FOUND, "LogNotFoundError", message, &fields)
            }),
            Error::LogIndex { .. } => {
                Python::attach(|py| raise(py, &LOG_INDEX, "LogIndexError", message))
            }
            Error::Storage { path, errno, .. } => {
                Python::attach(|py| storage_error(py, &message, errno, path))
            }
        }
    }
}
