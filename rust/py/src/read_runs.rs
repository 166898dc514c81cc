//! The histories selection read lately, kept whole, so the next turn's
//! history (the same messages and a few new ones) is read from where the
//! last one ended.
//!
//! `seen` remembers each message by its address: a hash lookup and an
//! entry of its own per message, scattered through memory, which at ten
//! thousand messages costs more in cache misses than the check itself. A
//! run keeps a history end to end instead: its messages, their shapes in
//! one array and their facts in another, read in order. The messages a new
//! history shares with a kept run from its start (the same objects, each
//! unchanged: its shape still holds) are taken from the run; the rest are
//! read, or recalled from `seen`, and the run grows by them.
//!
//! Like `seen`, a run holds every object its shapes name, so an address in
//! it is never another object's; and it keeps what it read under one
//! [`Context`] only.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use context_core::select::{MessageInfo, Truncation};
use pyo3::prelude::*;

use crate::seen::{self, Context, Cut, LaidOut, Shape, Shapes};
use crate::select::Read;

/// Runs kept: a server's live conversations, one run each.
const RUNS: usize = 32;
/// About the most all runs keep alive (text at a byte a character, as in `seen`).
const RUN_BYTES: usize = 96 << 20;

/// A history read, and what was read of each message.
pub struct Run {
    context: Context,
    messages: Vec<Py<PyAny>>,
    shapes: Shapes,
    infos: Vec<MessageInfo>,
    cuts: Vec<Vec<Cut>>,
    outputs: Vec<Option<LaidOut>>,
    /// What each message costs to keep, and all of them together.
    costs: Vec<usize>,
    cost: usize,
}

impl Run {
    pub fn new(context: Context) -> Self {
        Self {
            context,
            messages: Vec::new(),
            shapes: Shapes::default(),
            infos: Vec::new(),
            cuts: Vec::new(),
            outputs: Vec::new(),
            costs: Vec::new(),
            cost: 0,
        }
    }

    /// Messages in the run.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// What was read of every message of the run, into `read`.
    pub fn read_into(&self, py: Python<'_>, read: &mut Read) {
        read.infos.extend_from_slice(&self.infos);
        for (index, cuts) in self.cuts.iter().enumerate() {
            for cut in cuts {
                read.truncations.push(Truncation {
                    message: index,
                    ..cut.truncation.clone()
                });
                read.cut_texts.push(cut.text.clone_ref(py));
            }
        }
        read.laid_out.extend(self.outputs.iter().cloned());
    }

    /// Add `message` (at the run's end, its shape just walked into
    /// `walked`) with what was read of it and its laid-out form, if one is known.
    pub fn push(
        &mut self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        walked: &Shape,
        info: &MessageInfo,
        cuts: &[Cut],
        output: Option<&LaidOut>,
    ) {
        self.shapes.push_walked(message, walked);
        let cost = walked.cost() + output.map_or(0, |o| o.cost());
        self.costs.push(cost);
        self.cost += cost;
        self.messages.push(message.clone().unbind());
        self.infos.push(info.clone());
        self.cuts
            .push(cuts.iter().map(|cut| cut.clone_ref(py)).collect());
        self.outputs.push(output.cloned());
    }

    /// The messages from the `n`-th on, moved out (this keeps the first `n`).
    fn split_off(&mut self, n: usize) -> Run {
        let costs = self.costs.split_off(n.min(self.costs.len()));
        let cost: usize = costs.iter().sum();
        self.cost = self.cost.saturating_sub(cost);
        Run {
            context: self.context,
            messages: self.messages.split_off(n.min(self.messages.len())),
            shapes: self.shapes.split_off(n),
            infos: self.infos.split_off(n.min(self.infos.len())),
            cuts: self.cuts.split_off(n.min(self.cuts.len())),
            outputs: self.outputs.split_off(n.min(self.outputs.len())),
            costs,
            cost,
        }
    }

    /// Add the messages `items` begins with that are `from`'s, in its
    /// order (each found further on than the one before, the same object
    /// and unchanged), up to the first that is not.
    fn gather(&mut self, from: &Run, items: &[Bound<'_, PyAny>]) {
        let Some(py) = items.first().map(Bound::py) else {
            return;
        };
        let mut at_least = 0;
        for item in items {
            let address = item.as_ptr();
            let Some(at) = from.messages[at_least..]
                .iter()
                .position(|m| m.as_ptr() == address)
                .map(|k| at_least + k)
            else {
                break;
            };
            if !matches_kept(item, from.shapes.get(at)) {
                break;
            }
            self.shapes.push_from(py, &from.shapes, at);
            self.messages.push(from.messages[at].clone_ref(py));
            self.infos.push(from.infos[at].clone());
            self.cuts
                .push(from.cuts[at].iter().map(|cut| cut.clone_ref(py)).collect());
            self.outputs.push(from.outputs[at].clone());
            self.costs.push(from.costs[at]);
            self.cost += from.costs[at];
            at_least = at + 1;
        }
    }
}

static KEPT: Mutex<VecDeque<Run>> = Mutex::new(VecDeque::new());

/// Messages [`take`] handed out from runs, and shapes of kept messages it
/// checked, all calls together: what a test reads to see a history was
/// read from a run, for the work it should cost (see [`_run_counts`]).
static TAKEN: AtomicUsize = AtomicUsize::new(0);
static CHECKS: AtomicUsize = AtomicUsize::new(0);

/// `(messages taken from kept runs, shapes checked)` since the process
/// started, for tests: how much of each history selection read from runs.
#[pyfunction]
pub fn _run_counts() -> (usize, usize) {
    (
        TAKEN.load(Ordering::Relaxed),
        CHECKS.load(Ordering::Relaxed),
    )
}

fn matches_kept(item: &Bound<'_, PyAny>, shape: &[usize]) -> bool {
    CHECKS.fetch_add(1, Ordering::Relaxed);
    seen::matches(item, shape)
}

fn kept() -> std::sync::MutexGuard<'static, VecDeque<Run>> {
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The kept run read under `context` that `items` shares the longest start
/// with, cut to the part that still holds (each message the same object,
/// unchanged since); taken out, to be given back with [`keep`].
pub fn take(items: &[Bound<'_, PyAny>], context: Context) -> Option<Run> {
    let first = items.first()?.as_ptr();
    let mut run = {
        let mut runs = kept();
        let shared = |run: &Run| seen::shared_start(&run.messages, items);
        let best = runs
            .iter()
            .enumerate()
            .filter(|(_, run)| {
                run.context == context && run.messages.first().map(Py::as_ptr) == Some(first)
            })
            .max_by_key(|(_, run)| shared(run))
            .map(|(i, _)| i)?;
        runs.remove(best)?
    };
    let same = seen::shared_start(&run.messages, items);
    let holds = (0..same)
        .position(|i| !matches_kept(&items[i], run.shapes.get(i)))
        .unwrap_or(same);
    if holds == same && same < items.len() && same < run.len() {
        // The history left out some of the run's messages (a sliding
        // window): what else it shares is further on in the run. Only
        // looked for when its next message is there: a history whose last
        // message is new (a fresh input each turn) costs a scan of
        // addresses, nothing more.
        let next = items[same].as_ptr();
        if run.messages[same + 1..].iter().any(|m| m.as_ptr() == next) {
            let rest = run.split_off(same);
            run.gather(&rest, &items[same..]);
            drop(rest); // after the lock: dropping references can free objects
            TAKEN.fetch_add(run.len(), Ordering::Relaxed);
            return Some(run);
        }
    }
    drop(run.split_off(holds)); // after the lock: dropping references can free objects
    TAKEN.fetch_add(run.len(), Ordering::Relaxed);
    Some(run)
}

/// Give `run` back: first in line, with the runs it extends dropped (a
/// conversation keeps one) and the oldest past [`RUNS`] or [`RUN_BYTES`].
pub fn keep(run: Run) {
    if run.messages.is_empty() || run.cost > RUN_BYTES {
        return;
    }
    let mut gone = Vec::new();
    {
        let mut runs = kept();
        let mut i = 0;
        while i < runs.len() {
            let older = &runs[i];
            let extended =
                older.context == run.context && seen::begins(&run.messages, &older.messages);
            if extended {
                gone.extend(runs.remove(i));
            } else {
                i += 1;
            }
        }
        runs.push_front(run);
        let mut total: usize = runs.iter().map(|r| r.cost).sum();
        while runs.len() > RUNS || (total > RUN_BYTES && runs.len() > 1) {
            let Some(oldest) = runs.pop_back() else { break };
            total -= oldest.cost;
            gone.push(oldest);
        }
    }
    drop(gone); // after the lock: dropping references can free objects
}

/// Keep `output` as the laid-out form of `message`, message `index` of a
/// kept run read under `context`, if it is unchanged since.
pub fn remember_output(
    message: &Bound<'_, PyAny>,
    index: usize,
    context: Context,
    output: &LaidOut,
) {
    let mut old = None;
    {
        let mut runs = kept();
        let run = runs.iter_mut().find(|run| {
            run.context == context
                && run.messages.get(index).map(Py::as_ptr) == Some(message.as_ptr())
        });
        if let Some(run) = run
            && seen::matches(message, run.shapes.get(index))
        {
            let before = run.outputs[index].as_ref().map_or(0, |o| o.cost());
            run.costs[index] = run.costs[index].saturating_sub(before) + output.cost();
            run.cost = run.cost.saturating_sub(before) + output.cost();
            old = run.outputs[index].replace(Arc::clone(output));
        }
    }
    drop(old); // after the lock
}
