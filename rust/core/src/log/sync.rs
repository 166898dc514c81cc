//! Group commit for `Durability::Batch`: a background thread syncs the data
//! file, then the index, at most one window after an append.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::files::LogFile;

pub struct Syncer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    dirty: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Syncer {
    pub fn start(data: Arc<LogFile>, index: Arc<LogFile>, window: Duration) -> Self {
        let shared = Arc::new(Shared {
            dirty: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("context-core-log-sync".into())
            .spawn(move || {
                let mut stop = state
                    .stop
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                while !*stop {
                    stop = state
                        .wake
                        .wait_timeout(stop, window)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                    if state.dirty.swap(false, Ordering::AcqRel) {
                        // A failed background sync is retried on the next
                        // window and surfaces on flush/close, which sync again.
                        if data.sync().is_err() || index.sync().is_err() {
                            state.dirty.store(true, Ordering::Release);
                        }
                    }
                }
            })
            .ok();
        Self { shared, thread }
    }

    pub fn mark_dirty(&self) {
        self.shared.dirty.store(true, Ordering::Release);
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.halt();
    }
}
