//! What selection read of each message, remembered by the message's identity.
//!
//! A server hands the same history, the same dict objects, to every turn,
//! and one new message or three. Reading a message for selection (its
//! counts, tags, metadata, capped tool results) costs about a microsecond;
//! checking that a message read before is unchanged costs a walk over its
//! containers. So each message's facts are kept beside a strong reference to
//! it and its *shape*: the address and length of every dict, list and tuple
//! in it and the address of every key and value they hold. The reference
//! keeps every one of those objects alive, so no address can be reused while
//! the entry lives, and strings, numbers, booleans and `None` cannot change:
//! the same shape means the same message, exactly. Anything else inside a
//! message (a subclass, a custom object) could change unseen, so such a
//! message is read afresh every time.
//!
//! The laid-out form of a message (metadata keys taken off, tool results
//! capped) is kept too, so what is sent is the same objects turn after turn
//! and every cache keyed by identity after it hits as well.
//!
//! The references keep messages alive that the caller may have dropped: the
//! memo holds at most [`MEMO_BYTES`] of their text, oldest evicted first.
//! Every caller holds the GIL and no Python code runs while the lock is held,
//! so the lock is never held across a fork or by a thread waiting for the GIL.
//!
//! The one `unsafe` here is the shape walk on the C API: the safe iterators
//! take and drop a reference for every item, which made checking a message
//! cost as much as reading it.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex, MutexGuard};

use context_core::Encoding;
use context_core::select::{MessageInfo, Truncation};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The most text (in characters) the memo keeps alive.
const MEMO_BYTES: usize = 64 << 20;
/// Nesting deeper than this is read afresh (no message of an API is that deep).
const MAX_DEPTH: usize = 24;

/// What a message was read under: its facts differ with each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    pub encoding: Encoding,
    pub cap: Option<usize>,
    /// The tagger's number (see `PyTagger`), `None` when tags were not looked for.
    pub tagger: Option<u64>,
}

/// A capped tool result, with its text as a Python string made once.
#[derive(Debug)]
pub struct Cut {
    pub truncation: Truncation,
    pub text: Py<PyString>,
}

impl Cut {
    fn clone_ref(&self, py: Python<'_>) -> Self {
        Self {
            truncation: self.truncation.clone(),
            text: self.text.clone_ref(py),
        }
    }
}

struct Seen {
    /// Held, never read: while it lives its address and those in `shape`
    /// belong to these objects.
    #[allow(dead_code)]
    message: Py<PyAny>,
    shape: Vec<usize>,
    chars: usize,
    context: Context,
    info: MessageInfo,
    cuts: Vec<Cut>,
    /// The laid-out message and its shape, once asked for.
    output: Option<(Py<PyAny>, Vec<usize>)>,
}

#[derive(Default)]
struct Memo {
    entries: HashMap<usize, Seen>,
    order: VecDeque<usize>,
    chars: usize,
}

static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

fn memo() -> MutexGuard<'static, Memo> {
    MEMO.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The shape of `value` into `out` (cleared first), and the characters of
/// its strings; `false` if it holds anything whose change the shape would
/// not show.
pub fn shape_of(value: &Bound<'_, PyAny>, out: &mut Vec<usize>, chars: &mut usize) -> bool {
    out.clear();
    *chars = 0;
    // SAFETY: the GIL is held (a `Bound` proves it) and the walk calls no
    // Python code, so every borrowed reference it reads stays valid.
    unsafe { walk(value.as_ptr(), out, chars, 0) }
}

/// The walk of [`shape_of`] on the C API: borrowed references only, a few
/// nanoseconds a slot (the safe iterators count references on every item).
unsafe fn walk(
    value: *mut ffi::PyObject,
    out: &mut Vec<usize>,
    chars: &mut usize,
    depth: usize,
) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    unsafe {
        let kind = ffi::Py_TYPE(value);
        if kind == &raw mut ffi::PyDict_Type {
            out.push(ffi::PyDict_Size(value) as usize);
            let mut position: ffi::Py_ssize_t = 0;
            let mut key = std::ptr::null_mut();
            let mut item = std::ptr::null_mut();
            while ffi::PyDict_Next(value, &raw mut position, &raw mut key, &raw mut item) != 0 {
                if ffi::Py_TYPE(key) != &raw mut ffi::PyUnicode_Type {
                    return false;
                }
                out.push(key as usize);
                out.push(item as usize);
                if !walk(item, out, chars, depth + 1) {
                    return false;
                }
            }
            return true;
        }
        let list = kind == &raw mut ffi::PyList_Type;
        if list || kind == &raw mut ffi::PyTuple_Type {
            let len = if list {
                ffi::PyList_Size(value)
            } else {
                ffi::PyTuple_Size(value)
            };
            out.push(len as usize);
            for i in 0..len {
                let item = if list {
                    ffi::PyList_GetItem(value, i)
                } else {
                    ffi::PyTuple_GetItem(value, i)
                };
                out.push(item as usize);
                if item.is_null() || !walk(item, out, chars, depth + 1) {
                    return false;
                }
            }
            return true;
        }
        if kind == &raw mut ffi::PyUnicode_Type {
            *chars += ffi::PyUnicode_GetLength(value).max(0) as usize;
            return true;
        }
        value == ffi::Py_None()
            || kind == &raw mut ffi::PyLong_Type
            || kind == &raw mut ffi::PyFloat_Type
            || kind == &raw mut ffi::PyBool_Type
    }
}

/// The facts of `message` as read before under `context`, if its shape is
/// still `shape`.
pub fn recall(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    shape: &[usize],
    context: Context,
    scratch: &mut Vec<usize>,
) -> Option<Recalled> {
    let memo = memo();
    let seen = memo.entries.get(&(message.as_ptr() as usize))?;
    if seen.context != context || seen.shape != shape {
        return None;
    }
    // The caller may have changed what an earlier turn handed out.
    let output = seen.output.as_ref().and_then(|(output, expected)| {
        let mut chars = 0;
        let output = output.bind(py);
        (shape_of(output, scratch, &mut chars) && scratch == expected)
            .then(|| output.clone().unbind())
    });
    Some(Recalled {
        info: seen.info.clone(),
        cuts: seen.cuts.iter().map(|cut| cut.clone_ref(py)).collect(),
        output,
    })
}

/// What [`recall`] found of a message.
pub struct Recalled {
    pub info: MessageInfo,
    pub cuts: Vec<Cut>,
    /// Its laid-out form, if one was made and is unchanged.
    pub output: Option<Py<PyAny>>,
}

/// Remember what was read of `message` (of `shape`, holding `chars`
/// characters of text) under `context`.
pub fn remember(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    shape: Vec<usize>,
    chars: usize,
    context: Context,
    info: &MessageInfo,
    cuts: &[Cut],
) {
    if chars > MEMO_BYTES / 8 {
        return; // one message would crowd out the rest
    }
    let address = message.as_ptr() as usize;
    let seen = Seen {
        message: message.clone().unbind(),
        shape,
        chars,
        context,
        info: info.clone(),
        cuts: cuts.iter().map(|cut| cut.clone_ref(py)).collect(),
        output: None,
    };
    // What leaves the memo is dropped after the lock is released.
    let mut gone = Vec::new();
    {
        let mut memo = memo();
        if let Some(old) = memo.entries.insert(address, seen) {
            // Still queued under its address: only the size changes.
            memo.chars = memo.chars - old.chars + chars;
            gone.push(old);
        } else {
            memo.order.push_back(address);
            memo.chars += chars;
        }
        while memo.chars > MEMO_BYTES {
            let Some(oldest) = memo.order.pop_front() else {
                break;
            };
            if let Some(old) = memo.entries.remove(&oldest) {
                memo.chars -= old.chars;
                gone.push(old);
            }
        }
    }
    drop(gone);
}

/// Keep `output` as the laid-out form of `message` (of `shape`).
pub fn remember_output(message: &Bound<'_, PyAny>, shape: &[usize], output: &Bound<'_, PyAny>) {
    let mut output_shape = Vec::new();
    let mut chars = 0;
    if !shape_of(output, &mut output_shape, &mut chars) {
        return;
    }
    let old = {
        let mut memo = memo();
        match memo.entries.get_mut(&(message.as_ptr() as usize)) {
            Some(seen) if seen.shape == shape => {
                seen.output.replace((output.clone().unbind(), output_shape))
            }
            _ => None,
        }
    };
    drop(old); // after the lock
}
