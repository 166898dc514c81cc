//! A log handle inherited across `fork()`: told from the process's own for
//! the price of an atomic load per write, and kept from holding on to the
//! parent's lock.
//!
//! A child's copy of a writer shares the parent's lock (a flock belongs to
//! the open file both now hold), so the lock cannot tell them apart, and
//! asking the kernel for the process id costs a system call per append. A
//! handler registered with `pthread_atfork` counts forks in the child
//! instead; a handle remembers the count it was opened under.
//!
//! The same handler puts `/dev/null` in place of every writer lock the
//! process holds (`dup2`, which a handler run in a forked child may call): the
//! child then holds no reference to the lock, so the parent's `close`
//! releases it even while the child lives on, and the child's later close of
//! that descriptor closes only `/dev/null`.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTERED: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();
/// `/dev/null`, opened once, to put in place of a descriptor.
static NULL: AtomicI32 = AtomicI32::new(-1);
/// Writer locks held by this process (-1: a free slot). A fixed array of
/// atomics: a handler run in a forked child may take no lock.
static LOCKS: [AtomicI32; LOCK_SLOTS] = [const { AtomicI32::new(-1) }; LOCK_SLOTS];
const LOCK_SLOTS: usize = 256;

extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    let null = NULL.load(Ordering::Acquire);
    if null < 0 {
        return;
    }
    for slot in &LOCKS {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: dup2 is async-signal-safe; both descriptors are open
            // (a slot is cleared before its descriptor is closed).
            unsafe { libc::dup2(null, fd) };
        }
    }
}

fn register() {
    REGISTER.call_once(|| {
        if let Ok(null) = std::fs::File::open("/dev/null") {
            NULL.store(std::os::fd::IntoRawFd::into_raw_fd(null), Ordering::Release);
        }
        // SAFETY: registers a handler that only touches atomics and calls
        // dup2, all async-signal-safe, as a handler run in a forked child
        // must be.
        let status = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        REGISTERED.store(status == 0, Ordering::Release);
    });
}

/// Where a handle was opened: this process, after this many forks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    pid: u32,
    forks: u64,
}

impl Origin {
    pub fn here() -> Self {
        register();
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

/// A writer lock a child of a fork must not keep: registered while it is
/// held, cleared before it is closed.
pub struct LockSlot(Option<usize>);

impl LockSlot {
    /// Register `lock`; with every slot taken it is not (a child then keeps
    /// the lock until it closes the log or exits, as without this).
    pub fn hold(lock: &impl AsRawFd) -> Self {
        register();
        let fd = lock.as_raw_fd();
        let slot = LOCKS.iter().position(|slot| {
            slot.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        Self(slot)
    }
}

impl Drop for LockSlot {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            LOCKS[slot].store(-1, Ordering::Release);
        }
    }
}

/// In a child of a fork, put `/dev/null` in place of a descriptor that a
/// handle the child cannot drop (its sync thread's) still owns, so the file
/// is closed in the child all the same.
pub fn retire(file: &impl AsRawFd) {
    let null: RawFd = NULL.load(Ordering::Acquire);
    if null >= 0 {
        // SAFETY: both descriptors are open; the one replaced is owned by a
        // handle that is never dropped in this process.
        unsafe { libc::dup2(null, file.as_raw_fd()) };
    }
}
