//! Cache keys of the `str` objects seen lately, by identity.
//!
//! The count and tag caches key a text by a keyed 128-bit hash of its bytes
//! (exact, but the text is read on every lookup). An agent server hands the
//! same history, the same string objects, to every turn: the memo keeps each
//! long string's key beside a strong reference to the string, so the address
//! cannot be reused by another object while the entry lives, and a repeat
//! lookup is a map probe, not a pass over the text. Strings are immutable,
//! so the same object always has the same key: a hit is exact by
//! construction.
//!
//! The references keep strings alive that the caller may have dropped:
//! the memo holds at most [`MEMO_BYTES`] of them, oldest evicted first.
//! Short strings are not memoised (hashing them costs what a probe does).

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyString;

/// Texts shorter than this are keyed directly.
const MEMO_MIN_BYTES: usize = 256;
/// The most text the memo keeps alive.
const MEMO_BYTES: usize = 64 << 20;
/// A text larger than this is keyed directly (it would crowd out the rest).
const MEMO_MAX_TEXT: usize = 8 << 20;

#[derive(Default)]
struct Memo {
    keys: HashMap<usize, (Py<PyString>, u128, usize)>,
    order: VecDeque<usize>,
    bytes: usize,
}

static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

/// The cache key of `string`, whose text is `text`.
pub fn key_of(string: &Bound<'_, PyString>, text: &str) -> u128 {
    if !(MEMO_MIN_BYTES..=MEMO_MAX_TEXT).contains(&text.len()) {
        return context_core::text_key(text);
    }
    let address = string.as_ptr() as usize;
    // Every caller holds the GIL (a `Bound` proves it), and no Python code
    // runs under the lock (evicted strings are dropped after it: freeing a
    // `str` subclass can run its `__del__`), so the lock is never held
    // across a fork or by a thread that waits for the GIL.
    let mut gone = Vec::new();
    {
        let mut memo = MEMO
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&(_, key, _)) = memo.keys.get(&address) {
            return key;
        }
        let key = context_core::text_key(text);
        memo.keys
            .insert(address, (string.clone().unbind(), key, text.len()));
        memo.order.push_back(address);
        memo.bytes += text.len();
        while memo.bytes > MEMO_BYTES {
            let Some(oldest) = memo.order.pop_front() else {
                break;
            };
            if let Some(old) = memo.keys.remove(&oldest) {
                memo.bytes -= old.2;
                gone.push(old);
            }
        }
        drop(memo);
        drop(gone);
        key
    }
}
