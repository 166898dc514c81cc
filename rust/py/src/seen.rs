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

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use context_core::Encoding;
use context_core::select::{MessageInfo, Truncation};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rustc_hash::FxHashMap;

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
    pub fn clone_ref(&self, py: Python<'_>) -> Self {
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

    pub fn cost(&self) -> usize {
        self.chars + SLOT_BYTES * self.slots.len() + ENTRY_BYTES
    }

    /// The walk on the C API: borrowed references only, a few nanoseconds
    /// a slot (the safe iterators count references on every item).
    unsafe fn walk(&mut self, value: *mut ffi::PyObject, depth: usize) -> bool {
        unsafe {
            let Some(tag) = tag_of(value) else {
                return false;
            };
            self.slots.push(tag);
            self.walk_tagged(value, tag, depth)
        }
    }

    /// The walk of `value`, of kind `tag`, after its own slot.
    unsafe fn walk_tagged(&mut self, value: *mut ffi::PyObject, tag: usize, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        unsafe {
            match tag {
                DICT => {
                    self.slots.push(ffi::PyDict_Size(value) as usize);
                    let mut position: ffi::Py_ssize_t = 0;
                    let mut key = std::ptr::null_mut();
                    let mut item = std::ptr::null_mut();
                    while ffi::PyDict_Next(value, &raw mut position, &raw mut key, &raw mut item)
                        != 0
                    {
                        if ffi::Py_TYPE(key) != &raw mut ffi::PyUnicode_Type {
                            return false;
                        }
                        self.slots.push(key as usize);
                        self.objects.push(key);
                        self.chars += ffi::PyUnicode_GetLength(key).max(0) as usize;
                        if !self.item(item, depth) {
                            return false;
                        }
                    }
                    true
                }
                LIST | TUPLE => {
                    let len = sequence_len(value, tag);
                    self.slots.push(len as usize);
                    for i in 0..len {
                        let item = sequence_item(value, tag, i);
                        if item.is_null() || !self.item(item, depth) {
                            return false;
                        }
                    }
                    true
                }
                _ => {
                    if ffi::Py_TYPE(value) == &raw mut ffi::PyUnicode_Type {
                        self.chars += ffi::PyUnicode_GetLength(value).max(0) as usize;
                    }
                    true
                }
            }
        }
    }

    /// One held item: its address with its kind in the low bits, then its own walk.
    unsafe fn item(&mut self, item: *mut ffi::PyObject, depth: usize) -> bool {
        unsafe {
            let Some(tag) = tag_of(item) else {
                return false;
            };
            self.slots.push(item as usize | tag);
            self.objects.push(item);
            self.walk_tagged(item, tag, depth + 1)
        }
    }
}

/// Shapes end to end, and every object they name held.
#[derive(Default)]
pub struct Shapes {
    slots: Vec<usize>,
    ends: Vec<usize>,
    /// Never read: while these live, the addresses in `slots` are theirs.
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
    held_ends: Vec<usize>,
}

impl Shapes {
    /// Walk `value` and add its shape; `false` (and nothing added) if it
    /// holds anything a shape would not show.
    pub fn push(&mut self, value: &Bound<'_, PyAny>, scratch: &mut Shape) -> bool {
        if !scratch.of(value) {
            return false;
        }
        self.push_walked(value, scratch);
        true
    }

    /// Add the shape of `value`, just walked into `walked`.
    pub fn push_walked(&mut self, value: &Bound<'_, PyAny>, walked: &Shape) {
        self.slots.extend_from_slice(&walked.slots);
        self.ends.push(self.slots.len());
        self.held.extend(walked.hold(value));
        self.held_ends.push(self.held.len());
    }

    /// Add the `i`-th shape of `other` (of a value still the same object,
    /// unchanged), holding what it holds.
    pub fn push_from(&mut self, py: Python<'_>, other: &Shapes, i: usize) {
        self.slots.extend_from_slice(other.get(i));
        self.ends.push(self.slots.len());
        let start = if i == 0 { 0 } else { other.held_ends[i - 1] };
        let held = &other.held[start..other.held_ends[i]];
        self.held.extend(held.iter().map(|h| h.clone_ref(py)));
        self.held_ends.push(self.held.len());
    }

    /// Add `value` as checked by the caller, now and whenever it is asked
    /// about again (see [`Shapes::verified`]); no walk.
    pub fn push_verified(&mut self, value: &Bound<'_, PyAny>) {
        self.slots.push(VERIFIED);
        self.ends.push(self.slots.len());
        self.held.push(value.clone().unbind());
        self.held_ends.push(self.held.len());
    }

    /// Whether the `i`-th value was pushed by [`Shapes::push_verified`].
    pub fn verified(&self, i: usize) -> bool {
        self.get(i) == [VERIFIED]
    }

    /// The shape of the `i`-th value pushed.
    pub fn get(&self, i: usize) -> &[usize] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.slots[start..self.ends[i]]
    }

    /// The shapes from the `n`-th on, moved out (this keeps the first `n`).
    pub fn split_off(&mut self, n: usize) -> Shapes {
        if n >= self.ends.len() {
            return Shapes::default();
        }
        let slot_base = if n == 0 { 0 } else { self.ends[n - 1] };
        let held_base = if n == 0 { 0 } else { self.held_ends[n - 1] };
        Shapes {
            slots: self.slots.split_off(slot_base),
            ends: self
                .ends
                .split_off(n)
                .into_iter()
                .map(|e| e - slot_base)
                .collect(),
            held: self.held.split_off(held_base),
            held_ends: self
                .held_ends
                .split_off(n)
                .into_iter()
                .map(|e| e - held_base)
                .collect(),
        }
    }

    /// Keep the first `n` shapes; the references let go are returned, to be
    /// dropped where freeing objects is safe.
    pub fn truncate(&mut self, n: usize) -> Vec<Py<PyAny>> {
        if n >= self.ends.len() {
            return Vec::new();
        }
        self.ends.truncate(n);
        self.held_ends.truncate(n);
        self.slots.truncate(self.ends.last().copied().unwrap_or(0));
        self.held
            .split_off(self.held_ends.last().copied().unwrap_or(0))
    }
}

/// A Python object's address, owned or borrowed.
pub trait Address {
    fn address(&self) -> *mut ffi::PyObject;
}

impl Address for Py<PyAny> {
    fn address(&self) -> *mut ffi::PyObject {
        self.as_ptr()
    }
}

impl Address for Bound<'_, PyAny> {
    fn address(&self) -> *mut ffi::PyObject {
        self.as_ptr()
    }
}

/// How many messages `a` and `b` share from their start, by identity.
pub fn shared_start(a: &[Py<PyAny>], b: &[impl Address]) -> usize {
    a.iter()
        .zip(b)
        .take_while(|(x, y)| x.as_ptr() == y.address())
        .count()
}

/// Whether history `older` is where `newer` begins, by identity.
pub fn begins(newer: &[Py<PyAny>], older: &[Py<PyAny>]) -> bool {
    older.len() <= newer.len() && shared_start(older, newer) == older.len()
}

/// The kinds a slot names in its low bits (objects are aligned to at least
/// 8 bytes, so an address never uses them).
const LEAF: usize = 0;
const DICT: usize = 1;
const LIST: usize = 2;
const TUPLE: usize = 3;
/// A container checked by its address only: another shape covers what is
/// in it (see [`Stored::sharing`]).
const SHARED: usize = 4;
/// The whole shape of a value checked by its caller (see
/// [`Shapes::push_verified`]): [`matches`] never holds for it.
const VERIFIED: usize = 5;
const TAG_BITS: usize = 7;

/// The kind of `value`, or `None` for anything whose change a shape would
/// not show (a subclass, a custom object).
unsafe fn tag_of(value: *mut ffi::PyObject) -> Option<usize> {
    unsafe {
        let kind = ffi::Py_TYPE(value);
        if kind == &raw mut ffi::PyDict_Type {
            Some(DICT)
        } else if kind == &raw mut ffi::PyList_Type {
            Some(LIST)
        } else if kind == &raw mut ffi::PyTuple_Type {
            Some(TUPLE)
        } else if value == ffi::Py_None()
            || kind == &raw mut ffi::PyUnicode_Type
            || kind == &raw mut ffi::PyLong_Type
            || kind == &raw mut ffi::PyFloat_Type
            || kind == &raw mut ffi::PyBool_Type
        {
            Some(LEAF)
        } else {
            None
        }
    }
}

unsafe fn sequence_len(value: *mut ffi::PyObject, tag: usize) -> ffi::Py_ssize_t {
    unsafe {
        if tag == LIST {
            ffi::PyList_Size(value)
        } else {
            ffi::PyTuple_Size(value)
        }
    }
}

unsafe fn sequence_item(
    value: *mut ffi::PyObject,
    tag: usize,
    i: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    unsafe {
        if tag == LIST {
            ffi::PyList_GetItem(value, i)
        } else {
            ffi::PyTuple_GetItem(value, i)
        }
    }
}

/// Whether `value` still has the shape `slots` (made by [`Shape::of`] while
/// every object it names was held since, so each address is still that
/// object). Only the containers are read: a held string, number or `None`
/// at the same address is the same immutable value, so a message whose
/// containers hold the same addresses is the same message. Reading no
/// leaf keeps the check to a few cache lines a message.
pub fn matches(value: &Bound<'_, PyAny>, slots: &[usize]) -> bool {
    let mut at = 0;
    let Some(&tag) = slots.first().filter(|&&tag| tag != VERIFIED) else {
        return false;
    };
    at += 1;
    // SAFETY: the GIL is held (a `Bound` proves it), no Python code runs,
    // and every address in `slots` is of an object held since it was walked.
    unsafe { matches_tagged(value.as_ptr(), tag, slots, &mut at) && at == slots.len() }
}

unsafe fn matches_tagged(
    value: *mut ffi::PyObject,
    tag: usize,
    slots: &[usize],
    at: &mut usize,
) -> bool {
    let next = |at: &mut usize| {
        let slot = slots.get(*at).copied();
        *at += 1;
        slot
    };
    unsafe {
        match tag {
            DICT => {
                // The entries are counted, not asked for: one call fewer a dict.
                let Some(len) = next(at) else { return false };
                let mut entries = 0;
                let mut position: ffi::Py_ssize_t = 0;
                let mut key = std::ptr::null_mut();
                let mut item = std::ptr::null_mut();
                while ffi::PyDict_Next(value, &raw mut position, &raw mut key, &raw mut item) != 0 {
                    entries += 1;
                    if entries > len || next(at) != Some(key as usize) {
                        return false;
                    }
                    let Some(slot) = next(at) else { return false };
                    if slot & !TAG_BITS != item as usize
                        || !matches_tagged(item, slot & TAG_BITS, slots, at)
                    {
                        return false;
                    }
                }
                entries == len
            }
            LIST | TUPLE => {
                let len = sequence_len(value, tag);
                if next(at) != Some(len as usize) {
                    return false;
                }
                for i in 0..len {
                    let item = sequence_item(value, tag, i);
                    let Some(slot) = next(at) else { return false };
                    if slot & !TAG_BITS != item as usize
                        || !matches_tagged(item, slot & TAG_BITS, slots, at)
                    {
                        return false;
                    }
                }
                true
            }
            _ => true,
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
    output: Option<LaidOut>,
    /// Recalled since the eviction hand last passed it.
    used: bool,
}

/// A laid-out message, its shape, and what its shape is made of; shared
/// by the memos that hand it out.
pub struct Stored {
    message: Py<PyAny>,
    shape: Vec<usize>,
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
    cost: usize,
}

/// A laid-out form handed out before (see [`Stored::get`]).
pub type LaidOut = Arc<Stored>;

impl Stored {
    /// `output` walked and held; `None` if a shape would not show its changes.
    pub fn of(output: &Bound<'_, PyAny>) -> Option<LaidOut> {
        let mut walked = Shape::default();
        walked.of(output).then(|| {
            Arc::new(Self {
                message: output.clone().unbind(),
                shape: walked.slots.clone(),
                held: walked.hold(output),
                cost: walked.cost(),
            })
        })
    }

    /// The form, if the caller has not changed it since (checked only for
    /// what is sent, not for every message read).
    pub fn get(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let message = self.message.bind(py);
        matches(message, &self.shape).then(|| message.clone().unbind())
    }

    /// `output`, a copy of a message's top level, held; the values it
    /// shares with the message are checked by their addresses only.
    ///
    /// Sound where [`Stored::get`] is asked only after the message itself
    /// was found unchanged since the copy was made (as `seen` and
    /// `read_runs` do: a form is kept beside the shape of the message it
    /// was made from): the same values are then the same containers holding
    /// the same things, and checking them again would walk the message twice.
    /// `None` if a value is of a kind whose change a shape would not show.
    pub fn sharing(output: &Bound<'_, PyDict>) -> Option<LaidOut> {
        let mut shape = Vec::with_capacity(2 + 2 * output.len());
        let mut held = Vec::with_capacity(1 + 2 * output.len());
        shape.push(DICT);
        shape.push(output.len());
        held.push(output.clone().into_any().unbind());
        let mut chars = 0;
        for (key, value) in output.iter() {
            // SAFETY: the GIL is held and the objects are alive (bound).
            let tag = match unsafe { tag_of(value.as_ptr()) }? {
                LEAF => LEAF,
                _ => SHARED,
            };
            if let Ok(text) = key.cast::<PyString>() {
                chars += text.len().unwrap_or(0);
            }
            shape.push(key.as_ptr() as usize);
            shape.push(value.as_ptr() as usize | tag);
            held.push(key.unbind());
            held.push(value.unbind());
        }
        Some(Arc::new(Self {
            message: output.clone().into_any().unbind(),
            cost: chars + SLOT_BYTES * shape.len() + ENTRY_BYTES,
            shape,
            held,
        }))
    }

    pub fn cost(&self) -> usize {
        self.cost
    }
}

#[derive(Default)]
struct Memo {
    entries: FxHashMap<usize, Seen>,
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

/// The facts of each of `messages` read before under `context`, where it is
/// unchanged since (one lock for the history, and no walk of a message
/// that is not in the memo).
pub fn recall_all(
    py: Python<'_>,
    messages: &[Bound<'_, PyAny>],
    context: Context,
) -> Vec<Option<Recalled>> {
    let mut memo = memo();
    messages
        .iter()
        .map(|message| {
            let seen = memo.entries.get_mut(&(message.as_ptr() as usize))?;
            if seen.context != context || !matches(message, &seen.shape) {
                return None;
            }
            seen.used = true;
            Some(Recalled {
                info: seen.info.clone(),
                cuts: seen.cuts.iter().map(|cut| cut.clone_ref(py)).collect(),
                output: seen.output.clone(),
            })
        })
        .collect()
}

/// What [`recall_all`] found of a message.
pub struct Recalled {
    pub info: MessageInfo,
    pub cuts: Vec<Cut>,
    /// Its laid-out form, if one was made: see [`Stored::get`].
    pub output: Option<LaidOut>,
}

/// The first messages of the last histories asked about, by address (no
/// reference held: a match only says remembering may pay), each with how
/// often remembering did not pay off for histories beginning with it.
///
/// A server that keeps its history objects hands the same first message
/// every turn, and its messages are worth remembering; one that parses each
/// request afresh never does, and remembering would only cost. A history
/// whose kept form was not reused (a window that moves, or one turn whose
/// repair rebuilt its copies) is remembered again only after a wait that
/// doubles with each miss, up to [`MAX_WAIT`] sights; a reuse ends the wait.
pub struct RecentFirsts {
    firsts: Mutex<VecDeque<First>>,
    keep: usize,
}

#[derive(Clone, Copy)]
struct First {
    address: usize,
    /// Kept forms not reused, since the last that was (at most 6).
    misses: u32,
    /// Sights left before remembering again.
    wait: u32,
}

/// The longest wait between tries, in sights.
const MAX_WAIT: u32 = 64;

impl RecentFirsts {
    pub const fn new(keep: usize) -> Self {
        Self {
            firsts: Mutex::new(VecDeque::new()),
            keep,
        }
    }

    /// Whether a history beginning with `first` was asked about lately and
    /// is not waiting after a miss: remembering it may pay.
    pub fn seen_before(&self, first: Option<&Bound<'_, PyAny>>) -> bool {
        self.note(first, |entry, seen| {
            if !seen {
                return false;
            }
            if entry.wait > 0 {
                entry.wait -= 1;
                return false;
            }
            true
        })
    }

    /// Whether a history beginning with `first` was asked about lately
    /// (nothing changes).
    pub fn noted(&self, first: Option<&Bound<'_, PyAny>>) -> bool {
        let Some(address) = first.map(|m| m.as_ptr() as usize) else {
            return false;
        };
        self.firsts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|f| f.address == address)
    }

    /// What was kept for histories beginning with `first` was not reused.
    pub fn useless(&self, first: Option<&Bound<'_, PyAny>>) {
        self.note(first, |entry, _| {
            entry.misses = (entry.misses + 1).min(6);
            entry.wait = (1 << entry.misses).min(MAX_WAIT);
            false
        });
    }

    /// What was kept for histories beginning with `first` was reused.
    pub fn useful(&self, first: Option<&Bound<'_, PyAny>>) {
        self.note(first, |entry, _| {
            entry.misses = 0;
            entry.wait = 0;
            true
        });
    }

    /// Move `first`'s entry (made if new) to the front and apply `update`
    /// to it (told whether it was there).
    fn note(
        &self,
        first: Option<&Bound<'_, PyAny>>,
        update: impl FnOnce(&mut First, bool) -> bool,
    ) -> bool {
        let Some(address) = first.map(|m| m.as_ptr() as usize) else {
            return false;
        };
        let mut firsts = self
            .firsts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = firsts.iter().position(|f| f.address == address);
        let seen = found.is_some();
        let mut entry = found.and_then(|at| firsts.remove(at)).unwrap_or(First {
            address,
            misses: 0,
            wait: 0,
        });
        let answer = update(&mut entry, seen);
        firsts.push_front(entry);
        firsts.truncate(self.keep);
        answer
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
/// the one read under `context` and the message is unchanged since.
pub fn remember_output(message: &Bound<'_, PyAny>, context: Context, output: &LaidOut) {
    let kept = Arc::clone(output);
    let cost = kept.cost;
    let mut gone = Vec::new();
    let mut kept = Some(kept);
    let mut old = None;
    {
        let mut memo = memo();
        if let Some(seen) = memo.entries.get_mut(&(message.as_ptr() as usize))
            && seen.context == context
            && matches(message, &seen.shape)
        {
            old = seen.output.replace(kept.take().expect("not taken yet"));
            memo.cost = memo.cost + cost - old.as_ref().map_or(0, |o| o.cost);
            memo.settle(&mut gone);
        }
    }
    // After the lock: dropping references can free objects.
    drop((kept, old, gone));
}
