//! Histories a `Sanitizer` found clean lately, so the next turn's history
//! (the same messages and a few new ones) is checked from its last turn
//! on, not from the start (the argument: `context_core::sanitize::joint`).
//!
//! Each run holds its messages (strong references) and their shapes (see
//! `seen`): a message changed in place, at any depth, no longer matches and
//! the whole funnel runs. A server with many conversations on one
//! `Sanitizer` keeps [`RUNS`] of them; runs longer than [`MAX_RUN`]
//! messages are not kept (their shapes would cost more memory than the
//! funnel costs time).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use context_core::sanitize::{Joint, Plan, joint};
use pyo3::prelude::*;

use crate::json::PyJson;
use crate::seen::Shape;

/// Clean histories kept per funnel.
const RUNS: usize = 8;
/// The longest history kept.
const MAX_RUN: usize = 100_000;

/// A history the funnel left unchanged.
struct Run {
    messages: Vec<Py<PyAny>>,
    /// Never read: every object the shapes name, so none is freed and its
    /// address taken by another while the run is kept.
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
    /// The shapes of the messages, end to end; `shape_ends[i]` closes message `i`'s.
    shapes: Vec<usize>,
    shape_ends: Vec<usize>,
    /// Each tool-call id, and the first message holding it.
    ids: HashMap<String, usize>,
    /// The last message that starts a turn.
    last_turn_start: Option<usize>,
}

impl Run {
    fn shape(&self, i: usize) -> &[usize] {
        let start = if i == 0 { 0 } else { self.shape_ends[i - 1] };
        &self.shapes[start..self.shape_ends[i]]
    }

    /// Add `message` (its joint known) at the end.
    fn push(&mut self, message: &Bound<'_, PyAny>, joint: &Joint, scratch: &mut Shape) -> bool {
        if !scratch.of(message) {
            return false;
        }
        let index = self.messages.len();
        self.messages.push(message.clone().unbind());
        self.held.extend(scratch.hold(message));
        self.shapes.extend_from_slice(&scratch.slots);
        self.shape_ends.push(self.shapes.len());
        for id in &joint.ids {
            self.ids.entry(id.clone()).or_insert(index);
        }
        if joint.turn_start {
            self.last_turn_start = Some(index);
        }
        true
    }
}

/// The clean histories of one funnel.
#[derive(Default)]
pub struct CleanRuns {
    runs: Mutex<VecDeque<Run>>,
}

/// How [`CleanRuns::extend`] would check a history.
pub struct Extension {
    run: Run,
    /// Where the funnel runs again from: the last turn start of the clean part.
    pub from: usize,
    joints: Vec<Joint>,
}

impl CleanRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Run>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A kept clean history that `items` begins with, unchanged, and the
    /// point to check `items` from; `None` if there is none or the
    /// conditions of the argument do not hold.
    pub fn extension(&self, items: &[Bound<'_, PyAny>]) -> Option<Extension> {
        let run = {
            let mut runs = self.lock();
            let position = runs.iter().position(|run| {
                !run.messages.is_empty()
                    && run.messages.len() <= items.len()
                    && run
                        .messages
                        .iter()
                        .zip(items)
                        .all(|(kept, item)| kept.as_ptr() == item.as_ptr())
            })?;
            runs.remove(position)?
        };
        // Dropped (not kept again) if any of its messages changed since.
        let mut scratch = Shape::default();
        for (i, item) in items[..run.messages.len()].iter().enumerate() {
            if !scratch.of(item) || scratch.slots != run.shape(i) {
                return None;
            }
        }
        let from = run.last_turn_start.filter(|&c| c > 0);
        let Some(from) = from else {
            self.keep(run);
            return None;
        };
        let mut joints = Vec::with_capacity(items.len() - from);
        for item in &items[from..] {
            match joint(&PyJson(item.clone())) {
                Some(joint)
                    if !joint.system
                        && joint
                            .ids
                            .iter()
                            .all(|id| run.ids.get(id).is_none_or(|&at| at >= from)) =>
                {
                    joints.push(joint);
                }
                _ => {
                    self.keep(run);
                    return None;
                }
            }
        }
        Some(Extension { run, from, joints })
    }

    /// After the funnel ran on `items[extension.from..]`: if it changed
    /// nothing there, `items` is clean (kept, grown) and `true`.
    pub fn finish(&self, items: &[Bound<'_, PyAny>], extension: Extension, plan: &Plan) -> bool {
        let Extension {
            mut run,
            from,
            joints,
        } = extension;
        if !unchanged(plan, items.len() - from) {
            self.keep(run);
            return false;
        }
        let mut scratch = Shape::default();
        for i in run.messages.len()..items.len() {
            if !run.push(&items[i], &joints[i - from], &mut scratch) {
                return true; // clean, but not keepable past here
            }
        }
        self.keep(run);
        true
    }

    /// After a whole run: keep `items` if the funnel left them unchanged.
    pub fn remember(&self, items: &[Bound<'_, PyAny>], plan: &Plan) {
        if !unchanged(plan, items.len()) || items.is_empty() || items.len() > MAX_RUN {
            return;
        }
        let mut run = Run {
            messages: Vec::with_capacity(items.len()),
            held: Vec::new(),
            shapes: Vec::new(),
            shape_ends: Vec::with_capacity(items.len()),
            ids: HashMap::new(),
            last_turn_start: None,
        };
        let mut scratch = Shape::default();
        for item in items {
            let Some(joint) = joint(&PyJson(item.clone())) else {
                return;
            };
            if !run.push(item, &joint, &mut scratch) {
                return;
            }
        }
        self.keep(run);
    }

    fn keep(&self, run: Run) {
        if run.messages.len() > MAX_RUN {
            return;
        }
        let dropped = {
            let mut runs = self.lock();
            runs.push_front(run);
            (runs.len() > RUNS).then(|| runs.pop_back())
        };
        drop(dropped); // after the lock: dropping references may free objects
    }
}

/// Whether `plan` hands back all `len` messages as they were, in order,
/// with nothing lifted out.
fn unchanged(plan: &Plan, len: usize) -> bool {
    use context_core::sanitize::OutMessage;
    plan.is_unchanged()
        && plan.system.is_empty()
        && plan.messages.len() == len
        && plan
            .messages
            .iter()
            .enumerate()
            .all(|(i, m)| matches!(m, OutMessage::Original(j) if *j == i))
}
