//! Histories a `Sanitizer` answered lately, so the next turn's history (the
//! same messages and a few new ones) is run through the funnel from its
//! last turn on, not from the start; the argument is in
//! `context_core::sanitize::joints`.
//!
//! Each run holds its messages and the answer given (every object of both
//! held, with their shapes, see `seen`): a message changed in place, at any
//! depth, or a repaired copy the caller changed since, no longer matches and
//! the whole funnel runs. A server with many conversations on one
//! `Sanitizer` keeps [`RUNS`] of them; runs longer than [`MAX_RUN`]
//! messages are not kept (their shapes would cost more memory than the
//! funnel costs time).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use context_core::sanitize::{Joint, joint};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::json::PyJson;
use crate::sanitize::{PyChange, PySanitizeResult};
use crate::seen::{RecentFirsts, Shape};

/// Histories kept per funnel.
const RUNS: usize = 8;
/// The longest history kept.
const MAX_RUN: usize = 100_000;
/// The most messages kept in all.
const MAX_KEPT: usize = 200_000;

/// Shapes end to end, and every object they name held.
#[derive(Default)]
struct Shapes {
    slots: Vec<usize>,
    ends: Vec<usize>,
    /// Never read: while these live, the addresses in `slots` are theirs.
    #[allow(dead_code)]
    held: Vec<Py<PyAny>>,
}

impl Shapes {
    fn push(&mut self, value: &Bound<'_, PyAny>, scratch: &mut Shape) -> bool {
        if !scratch.of(value) {
            return false;
        }
        self.slots.extend_from_slice(&scratch.slots);
        self.ends.push(self.slots.len());
        self.held.extend(scratch.hold(value));
        true
    }

    fn get(&self, i: usize) -> &[usize] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.slots[start..self.ends[i]]
    }
}

/// A history and the funnel's answer for it.
struct Run {
    messages: Vec<Py<PyAny>>,
    shapes: Shapes,
    /// Each tool-call id, and the first message holding it.
    ids: HashMap<String, usize>,
    /// The last message that starts a turn.
    last_turn_start: Option<usize>,
    /// The answer: its messages, the repaired copies among them (by
    /// position, with their shapes), the lifted system text and the changes.
    outputs: Vec<Py<PyAny>>,
    built: Vec<usize>,
    built_shapes: Shapes,
    system: Py<PyAny>,
    changes: Vec<Py<PyChange>>,
}

impl Run {
    fn push_message(
        &mut self,
        message: &Bound<'_, PyAny>,
        joint: &Joint,
        scratch: &mut Shape,
    ) -> bool {
        if !self.shapes.push(message, scratch) {
            return false;
        }
        let index = self.messages.len();
        self.messages.push(message.clone().unbind());
        for id in &joint.ids {
            self.ids.entry(id.clone()).or_insert(index);
        }
        if joint.turn_start {
            self.last_turn_start = Some(index);
        }
        true
    }

    /// Record `outputs` (the answer's messages) and which are copies.
    fn set_outputs(
        &mut self,
        py: Python<'_>,
        outputs: Vec<Py<PyAny>>,
        scratch: &mut Shape,
    ) -> bool {
        let inputs: HashSet<usize> = self.messages.iter().map(|m| m.as_ptr() as usize).collect();
        self.built.clear();
        self.built_shapes = Shapes::default();
        for (position, output) in outputs.iter().enumerate() {
            if !inputs.contains(&(output.as_ptr() as usize)) {
                if !self.built_shapes.push(output.bind(py), scratch) {
                    return false;
                }
                self.built.push(position);
            }
        }
        self.outputs = outputs;
        true
    }
}

/// The histories one funnel answered lately.
pub struct Answered {
    runs: Mutex<VecDeque<Run>>,
    /// The histories asked about lately (see [`RecentFirsts`]).
    firsts: RecentFirsts,
}

impl Default for Answered {
    fn default() -> Self {
        Self {
            runs: Mutex::default(),
            firsts: RecentFirsts::new(16),
        }
    }
}

/// What [`Answered::extension`] found.
pub enum Lookup {
    /// A kept answer to extend.
    Extend(Box<Extension>),
    /// A kept answer the history begins with, which the conditions do not
    /// allow extending from its last turn start (given) for now.
    Blocked(Option<usize>),
    /// None that the history begins with unchanged.
    None,
}

/// A kept answer that a history extends, and where to run the funnel from.
pub struct Extension {
    run: Run,
    /// The last turn start of the kept history: the tail runs from here.
    pub from: usize,
    /// Where the answer for `messages[from]` stands in the kept answer.
    position: usize,
    joints: Vec<Joint>,
}

impl Answered {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Run>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A kept answer for a history that `items` begins with, everything
    /// unchanged, if the conditions of the argument hold for `items`.
    pub fn extension(&self, py: Python<'_>, items: &[Bound<'_, PyAny>]) -> Lookup {
        let run = {
            let mut runs = self.lock();
            let found = runs.iter().position(|run| {
                !run.messages.is_empty()
                    && run.messages.len() <= items.len()
                    && run
                        .messages
                        .iter()
                        .zip(items)
                        .all(|(kept, item)| kept.as_ptr() == item.as_ptr())
            });
            let Some(run) = found.and_then(|found| runs.remove(found)) else {
                // A kept history with the same first message that this one
                // does not extend: a window that moves, not a growing history.
                let first = items.first().map(Bound::as_ptr);
                if runs
                    .iter()
                    .any(|run| run.messages.first().map(Py::as_ptr) == first)
                {
                    drop(runs);
                    self.firsts.useless(items.first());
                }
                return Lookup::None;
            };
            run
        };
        // The cheap conditions first (the kept facts and the tail alone): a
        // history they do not hold for now is kept for later.
        let Some((from, position, joints)) = Self::conditions(&run, items) else {
            let blocked_at = run.last_turn_start;
            self.keep(run);
            return Lookup::Blocked(blocked_at);
        };
        // Then the walk: dropped (not kept again) if anything in it changed since.
        let mut scratch = Shape::default();
        for (i, item) in items[..run.messages.len()].iter().enumerate() {
            if !scratch.of(item) || scratch.slots != run.shapes.get(i) {
                return Lookup::None;
            }
        }
        for (i, &position) in run.built.iter().enumerate() {
            if !scratch.of(run.outputs[position].bind(py))
                || scratch.slots != run.built_shapes.get(i)
            {
                return Lookup::None;
            }
        }
        Lookup::Extend(Box::new(Extension {
            run,
            from,
            position,
            joints,
        }))
    }

    /// Where the tail starts, where its first message stands in the kept
    /// answer, and the tail's joints.
    fn conditions(run: &Run, items: &[Bound<'_, PyAny>]) -> Option<(usize, usize, Vec<Joint>)> {
        let from = run.last_turn_start.filter(|&c| c > 0)?;
        // Every change of the kept answer is before the tail (an inserted
        // first user message stands before everything).
        let before = run.changes.iter().all(|change| {
            let change = change.get();
            match change.index {
                Some(index) => index < from,
                None => change.action == "insert_user",
            }
        });
        let start = items[from].as_ptr();
        let position = run
            .outputs
            .iter()
            .rposition(|output| output.as_ptr() == start);
        let position = position.filter(|_| before)?;
        let mut joints = Vec::with_capacity(items.len() - from);
        for item in &items[from..] {
            let joint = joint(&PyJson(item.clone()))?;
            let reaches_back = joint
                .ids
                .iter()
                .any(|id| run.ids.get(id).is_some_and(|&at| at < from));
            if joint.system || reaches_back {
                return None;
            }
            joints.push(joint);
        }
        Some((from, position, joints))
    }

    /// The answer for `items`, from the kept one and the funnel's answer
    /// `tail` for `items[from..]`; kept in turn. `None` if the tail lifted
    /// a system text out (the whole funnel answers then).
    pub fn finish(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        extension: Extension,
        tail: &PySanitizeResult,
    ) -> PyResult<Option<PySanitizeResult>> {
        let Extension {
            mut run,
            from,
            position,
            joints,
        } = extension;
        // The argument needs the tail's first message (a user message) kept as
        // it is; and a refused message's reason names its index in the text.
        let unsafe_change = tail.changes.iter().any(|change| {
            let change = change.get();
            change.index.is_none_or(|i| i == 0) || change.action == "drop_invalid"
        });
        if unsafe_change || !tail.system.is_none(py) {
            self.keep(run);
            return Ok(None);
        }
        let tail_messages = tail.messages.bind(py);
        let mut outputs: Vec<Py<PyAny>> = run.outputs[..position]
            .iter()
            .map(|o| o.clone_ref(py))
            .collect();
        outputs.extend(tail_messages.iter().map(Bound::unbind));
        let changes = merge_changes(py, &run.changes, &tail.changes, from)?;
        let answer = PySanitizeResult {
            messages: PyList::new(py, &outputs)?.unbind(),
            system: run.system.clone_ref(py),
            changes: changes.iter().map(|c| c.clone_ref(py)).collect(),
        };
        let mut scratch = Shape::default();
        let mut keepable = true;
        for i in run.messages.len()..items.len() {
            keepable = keepable && run.push_message(&items[i], &joints[i - from], &mut scratch);
        }
        keepable = keepable && run.set_outputs(py, outputs, &mut scratch);
        if keepable {
            run.changes = changes;
            self.keep(run);
        }
        Ok(Some(answer))
    }

    /// Whether remembering the answer for `items` may pay (see [`RecentFirsts`]).
    pub fn seen_before(&self, items: &[Bound<'_, PyAny>]) -> bool {
        self.firsts.seen_before(items.first())
    }

    /// After a whole run: keep the answer for `items`, if it could be
    /// extended (every change before the last turn start) from a later turn
    /// start than `blocked_at` (where a kept one could not be).
    pub fn remember(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        answer: &PySanitizeResult,
        blocked_at: Option<usize>,
    ) {
        // A lifted system list (blocks) is the caller's to change: not kept.
        let system = answer.system.bind(py);
        let fixed_system =
            system.is_none() || system.is_exact_instance_of::<pyo3::types::PyString>();
        if items.is_empty()
            || items.len() > MAX_RUN
            || !fixed_system
            || !extendable(items, answer, blocked_at)
        {
            return;
        }
        let mut run = Run {
            messages: Vec::with_capacity(items.len()),
            shapes: Shapes::default(),
            ids: HashMap::new(),
            last_turn_start: None,
            outputs: Vec::new(),
            built: Vec::new(),
            built_shapes: Shapes::default(),
            system: answer.system.clone_ref(py),
            changes: answer.changes.iter().map(|c| c.clone_ref(py)).collect(),
        };
        let mut scratch = Shape::default();
        for item in items {
            let Some(joint) = joint(&PyJson(item.clone())) else {
                return;
            };
            if !run.push_message(item, &joint, &mut scratch) {
                return;
            }
        }
        let outputs = answer.messages.bind(py).iter().map(Bound::unbind).collect();
        if run.set_outputs(py, outputs, &mut scratch) {
            self.keep(run);
        }
    }

    /// Keep `run` first; drop the kept runs it extends (a conversation holds
    /// one), and the oldest past [`RUNS`] or [`MAX_KEPT`] messages in all.
    fn keep(&self, run: Run) {
        let mut dropped = Vec::new();
        {
            let mut runs = self.lock();
            let mut i = 0;
            while i < runs.len() {
                let older = &runs[i];
                let extended = older.messages.len() <= run.messages.len()
                    && older
                        .messages
                        .iter()
                        .zip(&run.messages)
                        .all(|(a, b)| a.as_ptr() == b.as_ptr());
                if extended {
                    dropped.extend(runs.remove(i));
                } else {
                    i += 1;
                }
            }
            runs.push_front(run);
            let mut total: usize = runs.iter().map(|r| r.messages.len()).sum();
            while runs.len() > RUNS || (total > MAX_KEPT && runs.len() > 1) {
                let Some(oldest) = runs.pop_back() else { break };
                total -= oldest.messages.len();
                dropped.push(oldest);
            }
        }
        drop(dropped); // after the lock: dropping references may free objects
    }
}

/// Whether the answer's changes are all before the last message that
/// starts a turn (found from the end), and that is past `blocked_at`: else
/// no extension could use it.
fn extendable(
    items: &[Bound<'_, PyAny>],
    answer: &PySanitizeResult,
    blocked_at: Option<usize>,
) -> bool {
    let last = items
        .iter()
        .rposition(|item| joint(&PyJson(item.clone())).is_some_and(|j| j.turn_start));
    let Some(last) = last.filter(|&c| c > 0 && blocked_at.is_none_or(|b| c > b)) else {
        return false;
    };
    answer.changes.iter().all(|change| {
        let change = change.get();
        change
            .index
            .map_or(change.action == "insert_user", |index| index < last)
    })
}

/// The changes of the whole history in the funnel's order: stage by stage,
/// the kept answer's before the tail's (theirs renumbered from `from`), and
/// an inserted first user message last, as the funnel reports it.
fn merge_changes(
    py: Python<'_>,
    kept: &[Py<PyChange>],
    tail: &[Py<PyChange>],
    from: usize,
) -> PyResult<Vec<Py<PyChange>>> {
    let shifted: Vec<Py<PyChange>> = tail
        .iter()
        .map(|change| Py::new(py, change.get().shifted(from)))
        .collect::<PyResult<_>>()?;
    let is_insert = |c: &Py<PyChange>| c.get().index.is_none();
    let mut out = Vec::with_capacity(kept.len() + shifted.len());
    for stage in 1..=4 {
        for list in [kept, &shifted[..]] {
            out.extend(
                list.iter()
                    .filter(|c| c.get().stage == stage && !is_insert(c))
                    .map(|c| c.clone_ref(py)),
            );
        }
    }
    out.extend(
        kept.iter()
            .chain(&shifted)
            .filter(|c| is_insert(c))
            .map(|c| c.clone_ref(py)),
    );
    Ok(out)
}
