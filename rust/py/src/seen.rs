//! What selection read of each message, remembered by the message's identity.
//!
//! A server hands the same history, the same dict objects, to every turn,
//! and one new message or three. Reading a message for selection (its
//! counts, tags, metadata, capped tool results) costs about a microsecond;
//! checking that a message read before is unchanged costs a walk over its
//! containers. So each message's facts are kept beside its *shape*: the
//! address and length of every dict, list and tuple in it and the address
//! of every key and value they hold, and a strong reference to every one of
//! those objects. Holding them all matters: a value the caller replaces is
//! not freed while the entry lives, so no new object can take its address
//! and pass for it. Strings, numbers, booleans and `None` cannot change, so
//! the same shape means the same message, exactly. Anything else inside a
//! message (a subclass, a custom object) could change unseen, so such a
//! message is read afresh every time.
//!
//! The laid-out form of a message (metadata keys taken off, tool results
//! capped) is kept too, so what is sent is the same objects turn after turn
//! and every cache keyed by identity after it hits as well.
//!
//! The references keep messages alive that the caller may have dropped: the
//! memo holds at most about [`MEMO_BYTES`] (text at a byte a character, and
//! the entries themselves), evicted in the order they came unless used
//! since (the CLOCK policy: a message read every turn stays).
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

/// About the most the memo keeps alive.
const MEMO_BYTES: usize = 64 << 20;
/// What an entry costs beside its text: per shape slot (the slot and a
/// reference), and for the entry itself.
const SLOT_BYTES: usize = 16;
const ENTRY_BYTES: usize = 256;
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

/// The shape of a value (see the module docs) and what it is made of, built
/// by [`Shape::of`]; reused between values to keep its buffers.
#[derive(Default)]
pub struct Shape {
    pub slots: Vec<usize>,
    /// Every key, value and item walked (borrowed: valid while the value is
    /// unchanged and the GIL held).
    objects: Vec<*mut ffi::PyObject>,
    chars: usize,
}

impl Shape {
    /// Walk `value`; `false` if it holds anything whose change the shape
    /// would not show.
    pub fn of(&mut self, value: &Bound<'_, PyAny>) -> bool {
        self.slots.clear();
        self.objects.clear();
        self.chars = 0;
        // SAFETY: the GIL is held (a `Bound` proves it) and the walk calls no
        // Python code, so every borrowed reference it reads stays valid.
        unsafe { self.walk(value.as_ptr(), 0) }
    }

    /// Strong references to `value` and everything walked in it.
    pub fn hold(&self, value: &Bound<'_, PyAny>) -> Vec<Py<PyAny>> {
        let py = value.py();
        let mut held = Vec::with_capacity(self.objects.len() + 1);
        held.push(value.clone().unbind());
        for &object in &self.objects {
            // SAFETY: borrowed from `value`'s containers just now, with the
            // GIL held and no Python code run since.
            held.push(unsafe { Bound::from_borrowed_ptr(py, object) }.unbind());
        }
        held
    }

    fn cost(&self) -> usize {
        self.chars + SLOT_BYTES * self.slots.len() + ENTRY_BYTES
    }

    /// The walk on the C API: borrowed references only, a few nanoseconds
    /// a slot (the safe iterators count references on every item).
    unsafe fn walk(&mut self, value: *mut ffi::PyObject, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        unsafe {
            let kind = ffi::Py_TYPE(value);
            if kind == &raw mut ffi::PyDict_Type {
                self.slots.push(ffi::PyDict_Size(value) as usize);
                let mut position: ffi::Py_ssize_t = 0;
                let mut key = std::ptr::null_mut();
                let mut item = std::ptr::null_mut();
                while ffi::PyDict_Next(value, &raw mut position, &raw mut key, &raw mut item) != 0 {
                    if ffi::Py_TYPE(key) != &raw mut ffi::PyUnicode_Type {
                        return false;
                    }
                    self.slots.push(key as usize);
                    self.slots.push(item as usize);
                    self.objects.push(key);
                    self.objects.push(item);
                    self.chars += ffi::PyUnicode_GetLength(key).max(0) as usize;
                    if !self.walk(item, depth + 1) {
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
                self.slots.push(len as usize);
                for i in 0..len {
                    let item = if list {
                        ffi::PyList_GetItem(value, i)
                    } else {
                        ffi::PyTuple_GetItem(value, i)
                    };
                    if item.is_null() {
                        return false;
                    }
                    self.slots.push(item as usize);
                    self.objects.push(item);
                    if !self.walk(item, depth + 1) {
                        return false;
                    }
                }
                return true;
            }
            if kind == &raw mut ffi::PyUnicode_Type {
                self.chars += ffi::PyUnicode_GetLength(value).max(0) as usize;
                return true;
            }
            value == ffi::Py_None()
                || kind == &raw mut ffi::PyLong_Type
                || kind == &raw mut ffi::PyFloat_Type
                || kind == &raw mut ffi::PyBool_Type
        }
    }
}

struct Seen {
    /// Never read: while these live, the addresses in `shape` are theirs.
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
    shape: Vec<usize>,
    cost: usize,
    context: Context,
    info: MessageInfo,
    cuts: Vec<Cut>,
    output: Option<Output>,
    /// Recalled since the eviction hand last passed it.
    used: bool,
}

/// A laid-out message, its shape, and what its shape is made of.
struct Output {
    message: Py<PyAny>,
    shape: Vec<usize>,
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
    cost: usize,
}

#[derive(Default)]
struct Memo {
    entries: HashMap<usize, Seen>,
    order: VecDeque<usize>,
    cost: usize,
}

impl Memo {
    /// Evict until within the bound, into `gone` (dropped after the lock).
    fn settle(&mut self, gone: &mut Vec<Seen>) {
        // Each entry gets one second chance a pass: at most two passes.
        let mut budget = 2 * self.order.len() + 1;
        while self.cost > MEMO_BYTES && budget > 0 {
            budget -= 1;
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            let Some(seen) = self.entries.get_mut(&oldest) else {
                continue;
            };
            if seen.used {
                seen.used = false;
                self.order.push_back(oldest);
                continue;
            }
            if let Some(old) = self.entries.remove(&oldest) {
                self.cost -= entry_cost(&old);
                gone.push(old);
            }
        }
    }
}

fn entry_cost(seen: &Seen) -> usize {
    seen.cost + seen.output.as_ref().map_or(0, |output| output.cost)
}

static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

fn memo() -> MutexGuard<'static, Memo> {
    MEMO.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The facts of `message` as read before under `context`, if its shape is
/// still `shape`.
pub fn recall(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    shape: &Shape,
    context: Context,
    scratch: &mut Shape,
) -> Option<Recalled> {
    let mut memo = memo();
    let seen = memo.entries.get_mut(&(message.as_ptr() as usize))?;
    if seen.context != context || seen.shape != shape.slots {
        return None;
    }
    seen.used = true;
    // The caller may have changed what an earlier turn handed out.
    let output = seen.output.as_ref().and_then(|output| {
        let laid_out = output.message.bind(py);
        (scratch.of(laid_out) && scratch.slots == output.shape).then(|| laid_out.clone().unbind())
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

/// The first messages of the last histories asked about, by address (no
/// reference held: a match only says remembering may pay), each marked
/// whether remembering paid off for histories beginning with it.
///
/// A server that keeps its history objects hands the same first message
/// every turn, and its messages are worth remembering; one that parses each
/// request afresh never does, and remembering would only cost.
pub struct RecentFirsts {
    firsts: Mutex<VecDeque<(usize, bool)>>,
    keep: usize,
}

impl RecentFirsts {
    pub const fn new(keep: usize) -> Self {
        Self {
            firsts: Mutex::new(VecDeque::new()),
            keep,
        }
    }

    /// Whether a history beginning with `first` was asked about lately, and
    /// remembering has not been found useless for it.
    pub fn seen_before(&self, first: Option<&Bound<'_, PyAny>>) -> bool {
        self.note(first, true)
    }

    /// Histories beginning with `first` did not reuse what was kept (a
    /// window that moves): do not remember them again.
    pub fn useless(&self, first: Option<&Bound<'_, PyAny>>) {
        self.note(first, false);
    }

    /// Note `first` at the front, marked `useful` only if it was already (a
    /// first sight is not); whether it was seen and useful.
    fn note(&self, first: Option<&Bound<'_, PyAny>>, useful: bool) -> bool {
        let Some(first) = first.map(|m| m.as_ptr() as usize) else {
            return false;
        };
        let mut firsts = self
            .firsts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = firsts.iter().position(|&(f, _)| f == first);
        let before = seen
            .and_then(|at| firsts.remove(at))
            .map(|(_, useful)| useful);
        firsts.push_front((first, useful && before.unwrap_or(true)));
        firsts.truncate(self.keep);
        before.unwrap_or(false) && useful
    }
}

/// The histories selection read lately.
pub static READ_FIRSTS: RecentFirsts = RecentFirsts::new(64);

/// Remember what was read of `message` (of `shape`, just walked) under `context`.
pub fn remember(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    shape: &Shape,
    context: Context,
    info: &MessageInfo,
    cuts: &[Cut],
) {
    let cost = shape.cost();
    if cost > MEMO_BYTES / 8 {
        return; // one message would crowd out the rest
    }
    let address = message.as_ptr() as usize;
    let seen = Seen {
        held: shape.hold(message),
        shape: shape.slots.clone(),
        cost,
        context,
        info: info.clone(),
        cuts: cuts.iter().map(|cut| cut.clone_ref(py)).collect(),
        output: None,
        used: false,
    };
    // What leaves the memo is dropped after the lock is released: dropping
    // a reference can free an object, and freeing can run Python code.
    let mut gone = Vec::new();
    {
        let mut memo = memo();
        if let Some(old) = memo.entries.insert(address, seen) {
            // Still queued under its address.
            memo.cost -= entry_cost(&old);
            gone.push(old);
        } else {
            memo.order.push_back(address);
        }
        memo.cost += cost;
        memo.settle(&mut gone);
    }
    drop(gone);
}

/// Keep `output` as the laid-out form of `message`, if the entry for it is
/// the one read under `context` with shape `shape`.
pub fn remember_output(
    message: &Bound<'_, PyAny>,
    shape: &Shape,
    context: Context,
    output: &Bound<'_, PyAny>,
) {
    let mut walked = Shape::default();
    if !walked.of(output) {
        return;
    }
    let kept = Output {
        message: output.clone().unbind(),
        shape: walked.slots.clone(),
        held: walked.hold(output),
        cost: walked.cost(),
    };
    let cost = kept.cost;
    let mut gone = Vec::new();
    let mut kept = Some(kept);
    let mut old = None;
    {
        let mut memo = memo();
        if let Some(seen) = memo.entries.get_mut(&(message.as_ptr() as usize))
            && seen.context == context
            && seen.shape == shape.slots
        {
            old = seen.output.replace(kept.take().expect("not taken yet"));
            memo.cost = memo.cost + cost - old.as_ref().map_or(0, |o| o.cost);
            memo.settle(&mut gone);
        }
    }
    // After the lock: dropping references can free objects.
    drop((kept, old, gone));
}
