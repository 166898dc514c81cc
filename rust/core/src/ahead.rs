//! Work started ahead of the moment its result is needed: handed to one
//! long-lived worker thread, so the caller goes on with other work (a
//! session's turn builds its prompt and reads its keyword matches while
//! the memory scan runs). If the worker has not begun it when the result is
//! wanted, the caller runs it itself, so waiting never costs more than
//! doing the work there.
//!
//! A forked child (agent servers fork workers) gets a worker of its own on
//! first use, and never touches a lock or a job of its parent's: a job
//! started before the fork reports itself [`Orphaned`] there, and the
//! caller does the work again. The one lock shared by every job is only
//! ever tried, never waited on, so one held by a thread that did not
//! survive a fork cannot block the child. And no job runs while the
//! process forks: a fork waits for those running to end, and none starts
//! until it is done, so a child never inherits what a job had locked (the
//! rows a scan reads) held by a thread it does not have.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, PoisonError, Weak};

type Work<T> = Box<dyn FnOnce() -> T + Send>;

/// Why a job gave no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The work panicked (on whichever thread ran it).
    Panicked,
    /// The job was started in another process, before a fork.
    Orphaned,
}

pub use Lost::Orphaned;

enum State<T> {
    Waiting(Work<T>),
    Running,
    Done(Result<T, Lost>),
    Taken,
}

struct Job<T> {
    state: Mutex<State<T>>,
    done: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run<T>(work: Work<T>) -> Result<T, Lost> {
    fenced(|| catch_unwind(AssertUnwindSafe(work)).map_err(|_| Lost::Panicked))
}

/// Runs `work` where a fork waits for it to end, and holds it back while
/// the process forks (once [`install`] has registered the handlers). For
/// any work that holds a lock with the interpreter released: a job's scan,
/// and the caller's own reads and writes of what jobs read. Never nested:
/// an inner one would wait for a fork that waits for the outer.
pub fn fenced<R>(work: impl FnOnce() -> R) -> R {
    let _running = Running::enter();
    work()
}

/// Registers the fork handlers that make [`fenced`] hold: called where no
/// fork can interleave (a Python module's import, under the interpreter's
/// lock), as a fork in the middle of a first registration would leave the
/// child waiting on it for ever. [`Ahead::start`] calls it too.
pub fn install() {
    REGISTER.call_once(register_fork_handlers);
}

/// Jobs running now, and whether the process is forking: atomics only, as
/// a handler run in a forked child may take no lock.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
static FORKING: AtomicBool = AtomicBool::new(false);
static REGISTER: Once = Once::new();

/// A job counted as running (not begun while the process forks).
struct Running;

impl Running {
    fn enter() -> Self {
        loop {
            while FORKING.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            RUNNING.fetch_add(1, Ordering::SeqCst);
            if !FORKING.load(Ordering::SeqCst) {
                return Self;
            }
            RUNNING.fetch_sub(1, Ordering::SeqCst); // the fork came first: it goes on
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

extern "C" fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    while RUNNING.load(Ordering::SeqCst) > 0 {
        std::thread::yield_now();
    }
}

extern "C" fn after_fork_in_parent() {
    FORKING.store(false, Ordering::SeqCst);
}

extern "C" fn after_fork_in_child() {
    RUNNING.store(0, Ordering::SeqCst);
    FORKING.store(false, Ordering::SeqCst);
}

#[allow(unsafe_code)]
fn register_fork_handlers() {
    #[cfg(unix)]
    // SAFETY: the handlers touch atomics only (and yield, in the parent).
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        );
    }
}

/// A job as the worker sees it, whatever it returns.
trait Runnable: Send + Sync {
    /// Runs the job if no one has begun it.
    fn run_waiting(&self);
}

impl<T: Send> Runnable for Job<T> {
    fn run_waiting(&self) {
        let work = {
            let mut state = lock(&self.state);
            match std::mem::replace(&mut *state, State::Running) {
                State::Waiting(work) => work,
                other => {
                    *state = other;
                    return;
                }
            }
        };
        let result = run(work);
        *lock(&self.state) = State::Done(result);
        self.done.notify_all();
    }
}

/// The worker of this process: its id (a forked child's differs), and the
/// queue the worker reads. A job is queued weakly: one dropped unstarted
/// is skipped, and keeps nothing alive.
type Worker = Option<(u32, Sender<Weak<dyn Runnable>>)>;

static WORKER: Mutex<Worker> = Mutex::new(None);

/// How many times [`queue`] tries the worker's lock before it leaves the
/// job to its waiter.
const LOCK_TRIES: usize = 100;

/// Queues `job` for this process's worker (started on first use, and again
/// in a forked child); `false` where none could take it (the lock busy, or
/// the OS refused a thread): the waiter then runs the job itself.
fn queue(job: Weak<dyn Runnable>) -> bool {
    // Tried a bounded number of times: another thread holds it for
    // microseconds, one lost in a fork forever.
    let Some(mut worker) = (0..LOCK_TRIES).find_map(|_| match WORKER.try_lock() {
        Ok(worker) => Some(worker),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => {
            std::thread::yield_now();
            None
        }
    }) else {
        return false;
    };
    let pid = std::process::id();
    if worker.as_ref().is_some_and(|(owner, _)| *owner != pid) {
        // The parent's queue: its reader did not survive the fork, and
        // dropping the sender could wait on a lock the parent held.
        std::mem::forget(worker.take());
    }
    if worker.is_none() {
        let (sender, receiver) = channel::<Weak<dyn Runnable>>();
        let started = std::thread::Builder::new()
            .name("context-core-ahead".into())
            .spawn(move || {
                for job in receiver {
                    if let Some(job) = job.upgrade() {
                        job.run_waiting();
                    }
                }
            });
        if started.is_err() {
            return false;
        }
        *worker = Some((pid, sender));
    }
    let sent = worker
        .as_ref()
        .is_some_and(|(_, sender)| sender.send(job).is_ok());
    if !sent {
        *worker = None; // the worker is gone: the next job starts another
    }
    sent
}

/// A result being computed ahead (see the module's notes).
pub struct Ahead<T> {
    job: Arc<Job<T>>,
    pid: u32,
}

impl<T: Send + 'static> Ahead<T> {
    /// Starts `work` on the worker thread.
    pub fn start(work: impl FnOnce() -> T + Send + 'static) -> Self {
        let ahead = Self::new(work);
        let runnable: Arc<dyn Runnable> = ahead.job.clone();
        queue(Arc::downgrade(&runnable));
        ahead
    }

    /// `work` as a job no worker was given (its waiter runs it).
    fn new(work: impl FnOnce() -> T + Send + 'static) -> Self {
        install();
        Self {
            job: Arc::new(Job {
                state: Mutex::new(State::Waiting(Box::new(work))),
                done: Condvar::new(),
            }),
            pid: std::process::id(),
        }
    }

    /// Whether [`wait`](Self::wait) would return at once: the job is done
    /// (or is another process's).
    pub fn is_ready(&self) -> bool {
        self.pid != std::process::id() || matches!(*lock(&self.job.state), State::Done(_))
    }

    /// The result: waited for if the worker is running the job, computed
    /// here if it has not begun.
    pub fn wait(self) -> Result<T, Lost> {
        if self.pid != std::process::id() {
            return Err(Lost::Orphaned);
        }
        let mut state = lock(&self.job.state);
        loop {
            match std::mem::replace(&mut *state, State::Taken) {
                State::Waiting(work) => {
                    drop(state);
                    return run(work);
                }
                State::Running => {
                    *state = State::Running;
                    state = self
                        .job
                        .done
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                State::Done(result) => return result,
                State::Taken => unreachable!("a job's result is taken once, by its own wait"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_any_order() {
        let jobs: Vec<_> = (0..64u64).map(|i| Ahead::start(move || i * i)).collect();
        for (i, job) in jobs.into_iter().enumerate().rev() {
            assert_eq!(job.wait(), Ok((i * i) as u64));
        }
    }

    #[test]
    fn the_waiter_runs_a_job_no_one_has_begun() {
        let job = Ahead::new(|| std::thread::current().id());
        assert_eq!(job.wait(), Ok(std::thread::current().id()));
    }

    #[test]
    fn a_job_the_worker_runs_is_waited_for() {
        let (release, gate) = channel::<()>();
        let job = Ahead::start(move || gate.recv().is_ok());
        assert!(!job.is_ready());
        let waiter = std::thread::spawn(move || job.wait());
        release.send(()).unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(true));
    }

    #[test]
    fn the_worker_runs_a_job_no_one_waits_for() {
        let job = Ahead::start(|| std::thread::current().name().map(str::to_owned));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !job.is_ready() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(job.wait(), Ok(Some("context-core-ahead".to_owned())));
    }

    #[test]
    fn a_job_dropped_unwaited_still_lets_the_worker_go_on() {
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..16 {
            let ran = Arc::clone(&ran);
            drop(Ahead::start(move || ran.fetch_add(1, Ordering::SeqCst)));
        }
        assert_eq!(Ahead::start(|| 7).wait(), Ok(7));
    }

    #[test]
    fn a_panic_is_reported_and_the_worker_lives_on() {
        let failed = Ahead::start(|| -> u8 { panic!("in the job") });
        assert_eq!(failed.wait(), Err(Lost::Panicked));
        assert_eq!(Ahead::start(|| 3).wait(), Ok(3));
    }

    #[test]
    fn a_job_of_another_process_is_orphaned() {
        let mut job = Ahead::start(|| 1);
        job.pid = job.pid.wrapping_add(1); // as a forked child sees its parent's
        assert_eq!(job.wait(), Err(Orphaned));
    }
}
