//! Spreading a batch over the machine's cores.
//!
//! Scoped threads, spawned per batch, rather than a persistent pool: agent
//! servers fork workers (gunicorn, multiprocessing), and a pool's threads do not
//! survive a fork while its bookkeeping does, which deadlocks the child (why HF
//! tokenizers turns parallelism off after a fork). Spawning costs ~20 µs a
//! thread, so batches go parallel only above [`PARALLEL_MIN_BYTES`]. Work is
//! handed out in small blocks from a shared queue so uneven texts still balance.

use std::sync::Mutex;
use std::thread;

/// Batches with fewer bytes than this run on the calling thread.
pub const PARALLEL_MIN_BYTES: usize = 64 * 1024;

/// Items per block taken from the shared queue.
const BLOCK: usize = 64;

/// Threads to use: the cores available to this process, at most 16.
pub fn thread_count() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get().min(16))
}

/// `out[i] = f(items[i])` for all `i`, on several threads when the batch is large.
pub fn map_into<T: Sync, R: Send>(
    items: &[T],
    out: &mut [R],
    total_bytes: usize,
    f: impl Fn(&T) -> R + Sync,
) {
    assert_eq!(items.len(), out.len());
    let threads = thread_count().min(items.len().div_ceil(BLOCK));
    if threads <= 1 || total_bytes < PARALLEL_MIN_BYTES {
        for (slot, item) in out.iter_mut().zip(items) {
            *slot = f(item);
        }
        return;
    }
    fill_each(out, BLOCK, threads, |i| f(&items[i]));
}

/// `out[i] = f(i)` for all `i`, on `threads` threads (this one included):
/// each takes blocks of `block` slots from a shared queue, so uneven work
/// still balances.
pub fn fill_each<R: Send>(
    out: &mut [R],
    block: usize,
    threads: usize,
    f: impl Fn(usize) -> R + Sync,
) {
    let block = block.max(1);
    let queue = Mutex::new(out.chunks_mut(block).enumerate());
    let work = || {
        loop {
            let next = queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .next();
            let Some((n, slots)) = next else { break };
            for (j, slot) in slots.iter_mut().enumerate() {
                *slot = f(n * block + j);
            }
        }
    };
    thread::scope(|scope| {
        for _ in 1..threads {
            // A refused thread (a process limit in a container) is not an
            // error: the threads that did start, this one included, drain the queue.
            let _ = thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_matches_serial() {
        let items: Vec<usize> = (0..10_000).collect();
        let mut out = vec![0usize; items.len()];
        map_into(&items, &mut out, usize::MAX, |x| x * 3);
        assert!(out.iter().enumerate().all(|(i, &v)| v == i * 3));
    }

    #[test]
    fn fill_each_fills_every_slot_by_its_index() {
        for (len, block, threads) in [
            (0, 4, 2),
            (1, 4, 3),
            (1000, 7, 2),
            (1000, 1000, 4),
            (999, 1, 1),
        ] {
            let mut out = vec![usize::MAX; len];
            fill_each(&mut out, block, threads, |i| i * 2 + 1);
            assert!(
                out.iter().enumerate().all(|(i, &v)| v == i * 2 + 1),
                "{len} {block} {threads}"
            );
        }
    }
}
