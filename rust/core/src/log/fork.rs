//! Telling a log handle inherited across `fork()` from the process's own,
//! for the price of an atomic load per write.
//!
//! A child's copy of a writer shares the parent's lock (a flock belongs to
//! the open file both now hold), so the lock cannot tell them apart, and
//! asking the kernel for the process id costs a system call per append. A
//! handler registered with `pthread_atfork` counts forks in the child
//! instead; a handle remembers the count it was opened under.

#![allow(unsafe_code)]

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Where a handle was opened: this process, after this many forks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    pid: u32,
    forks: u64,
}

impl Origin {
    pub fn here() -> Self {
        REGISTER.call_once(|| {
            // SAFETY: registers a handler that only increments an atomic, which
            // is async-signal-safe, as a handler run in a forked child must be.
            let status = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            REGISTERED.store(status == 0, Ordering::Release);
        });
        Self {
            pid: std::process::id(),
            forks: FORKS.load(Ordering::Relaxed),
        }
    }

    /// The process that opened the handle.
    pub fn pid(self) -> u32 {
        self.pid
    }

    /// Whether this is not that process: a child of a fork since.
    pub fn is_elsewhere(self) -> bool {
        if REGISTERED.load(Ordering::Acquire) {
            FORKS.load(Ordering::Relaxed) != self.forks
        } else {
            std::process::id() != self.pid
        }
    }
}
