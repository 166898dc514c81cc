//! Histories a `Sanitizer` answered lately, so the next turn's history (the
//! same messages and a few new ones) is run through the funnel from a turn
//! start where the kept answer splits (the last one before any repair of
//! the turn in progress), not from the start; the argument is in
//! `context_core::sanitize::joints`. The answer for the part before the
//! split is handed out again as the same objects, repaired copies too, so
//! the caches after the funnel, keyed by identity, hit turn after turn.
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

use context_core::sanitize::{Joint, called_ids, joint};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyTuple};

use crate::json::PyJson;
use crate::sanitize::{PyChange, PySanitizeResult};
use crate::seen::{self, RecentFirsts, Shape, Shapes, matches};

/// Histories kept per funnel.
const RUNS: usize = 8;
/// The longest history kept.
const MAX_RUN: usize = 100_000;
/// The most messages kept in all.
const MAX_KEPT: usize = 200_000;
/// Turn starts tried, from the last, for a split of a whole answer whose
/// turn in progress was repaired (each try runs the funnel from there).
const TRIED_SPLITS: usize = 3;

/// A turn start `at` where the answer splits: the answer's messages before
/// `position` and its changes before `at` are the funnel's answer for the
/// messages before `at`. A tail runs from here; its answer may change
/// `messages[at]` itself (a later message merged into it), so `position`
/// is kept rather than looked up.
#[derive(Clone, Copy)]
struct Split {
    at: usize,
    position: usize,
}

/// `(from, position, joints, ids reused from before the split, the tail's
/// first assistant message when there are any)`.
type Conditions = (usize, usize, Vec<Joint>, Vec<String>, Option<usize>);

/// A history and the funnel's answer for it.
struct Run {
    messages: Vec<Py<PyAny>>,
    shapes: Shapes,
    /// Each tool-call id, and the first message holding it.
    ids: HashMap<String, usize>,
    /// The ids in the order they were first noted, with that message: a
    /// truncated run forgets the ones its new tail must note again.
    first_ids: Vec<(usize, String)>,
    /// The last message that starts a turn.
    last_turn_start: Option<usize>,
    /// Where the answer is known to split: see [`Split`].
    split: Option<Split>,
    /// The answer: its messages, the repaired copies among them (by
    /// position, with their shapes), the lifted system text and the changes.
    outputs: Vec<Py<PyAny>>,
    built: Vec<usize>,
    built_shapes: Shapes,
    system: Py<PyAny>,
    changes: Vec<Py<PyChange>>,
    /// The ids of the calls the answer keeps before a split's position
    /// (that position with them), found when a tail first reuses one.
    calls_before: Option<(usize, HashSet<String>)>,
}

impl Run {
    /// How much of the run a history must begin with to extend it: up to
    /// and with the message at its split (the argument needs it as it was),
    /// or all of it without one.
    fn kept_part(&self) -> usize {
        self.split
            .map_or(self.messages.len(), |split| split.at + 1)
            .min(self.messages.len())
    }

    /// Keep the first `n` messages, and the ids first noted in them; the
    /// references let go.
    fn truncate(&mut self, n: usize) -> Vec<Py<PyAny>> {
        while self.first_ids.last().is_some_and(|(at, _)| *at >= n) {
            let (_, id) = self.first_ids.pop().expect("checked");
            self.ids.remove(&id);
        }
        let mut gone = self.shapes.truncate(n);
        if n < self.messages.len() {
            gone.extend(self.messages.split_off(n));
        }
        self.last_turn_start = self.last_turn_start.filter(|&c| c < n);
        gone
    }

    /// Of `ids`, those the answer keeps a call for before `position`.
    fn kept_calls(
        &mut self,
        py: Python<'_>,
        position: usize,
        ids: &[String],
        anthropic: bool,
    ) -> Vec<String> {
        if self
            .calls_before
            .as_ref()
            .is_none_or(|(at, _)| *at != position)
        {
            let calls = self.outputs[..position]
                .iter()
                .flat_map(|output| called_ids(&PyJson(output.bind(py).clone()), anthropic))
                .collect();
            self.calls_before = Some((position, calls));
        }
        let (_, calls) = self.calls_before.as_ref().expect("just set");
        let mut kept: Vec<String> = ids
            .iter()
            .filter(|id| calls.contains(*id))
            .cloned()
            .collect();
        kept.sort_unstable();
        kept.dedup();
        kept
    }

    fn push_message(
        &mut self,
        message: &Bound<'_, PyAny>,
        joint: &Joint,
        scratch: &mut Shape,
        verified: bool,
    ) -> bool {
        if verified {
            self.shapes.push_verified(message);
        } else if !self.shapes.push(message, scratch) {
            return false;
        }
        let index = self.messages.len();
        self.messages.push(message.clone().unbind());
        for id in &joint.ids {
            if !self.ids.contains_key(id) {
                self.ids.insert(id.clone(), index);
                self.first_ids.push((index, id.clone()));
            }
        }
        if joint.turn_start {
            self.last_turn_start = Some(index);
        }
        true
    }

    /// The split at turn start `at`, which every change is before: its
    /// message is in the answer as it is.
    fn split_at(&self, at: usize) -> Option<Split> {
        let start = self.messages[at].as_ptr();
        let position = self.outputs.iter().rposition(|o| o.as_ptr() == start)?;
        Some(Split { at, position })
    }

    /// Record `outputs` (the answer's messages) and which are copies.
    fn set_outputs(
        &mut self,
        py: Python<'_>,
        outputs: Vec<Py<PyAny>>,
        scratch: &mut Shape,
    ) -> bool {
        self.built.clear();
        self.built_shapes = Shapes::default();
        self.outputs = Vec::new();
        self.add_outputs(py, outputs, 0, scratch)
    }

    /// Keep the answer's messages before `position` (and which of them are
    /// copies); add `tail` after them, its copies being those that are not
    /// among the run's messages from `from` on.
    fn set_tail_outputs(
        &mut self,
        py: Python<'_>,
        position: usize,
        tail: Vec<Py<PyAny>>,
        from: usize,
        scratch: &mut Shape,
    ) -> bool {
        let kept = self.built.partition_point(|&p| p < position);
        self.built.truncate(kept);
        drop(self.built_shapes.truncate(kept));
        self.outputs.truncate(position);
        self.add_outputs(py, tail, from, scratch)
    }

    fn add_outputs(
        &mut self,
        py: Python<'_>,
        outputs: Vec<Py<PyAny>>,
        inputs_from: usize,
        scratch: &mut Shape,
    ) -> bool {
        let inputs: HashSet<usize> = self.messages[inputs_from..]
            .iter()
            .map(|m| m.as_ptr() as usize)
            .collect();
        for output in outputs {
            if !inputs.contains(&(output.as_ptr() as usize)) {
                if !self.built_shapes.push(output.bind(py), scratch) {
                    return false;
                }
                self.built.push(self.outputs.len());
            }
            self.outputs.push(output);
        }
        true
    }
}

/// The repaired copies of a whole answer, by position, with their shapes,
/// and the address of that history's first message.
#[derive(Default)]
struct LastCopies {
    first: usize,
    copies: Vec<(usize, Py<PyAny>)>,
    shapes: Shapes,
}

/// The histories one funnel answered lately.
pub struct Answered {
    /// The funnel's provider: which messages' calls pairing counts.
    anthropic: bool,
    runs: Mutex<VecDeque<Run>>,
    /// The copies of the last whole answer (see [`Answered::reuse_copies`]).
    last_copies: Mutex<LastCopies>,
    /// The histories asked about lately (see [`RecentFirsts`]).
    firsts: RecentFirsts,
}

impl Answered {
    pub fn new(anthropic: bool) -> Self {
        Self {
            anthropic,
            runs: Mutex::default(),
            last_copies: Mutex::default(),
            firsts: RecentFirsts::new(16),
        }
    }
}

/// Which messages of a history the caller vouches for: each is one it
/// checked, in this same call, to be exactly as when it was made, and it
/// was so whenever vouched for before. Such a message is kept without its
/// shape (no walk) and taken as unchanged when vouched for again; asked
/// about without that, it never matches. Selection vouches for the copies
/// it lays out (its own objects, checked against what they were made from).
#[derive(Clone, Copy, Default)]
pub struct Verified<'a>(pub &'a [bool]);

impl Verified<'_> {
    fn at(self, i: usize) -> bool {
        self.0.get(i).copied().unwrap_or(false)
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
    /// Calls kept before `from` whose ids the tail uses again: the tail
    /// runs with them as made (`Sanitizer::sanitize_after`).
    pub called: Vec<String>,
    /// With reused ids, the tail's first assistant message: it must stay
    /// (one dropped by the first stage would let a result reach back).
    boundary: Option<usize>,
}

impl Answered {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Run>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A kept answer for a history that `items` begins with, everything
    /// unchanged, if the conditions of the argument hold for `items`.
    /// `verified[i]`: see [`Verified`].
    pub fn extension(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        verified: Verified<'_>,
    ) -> Lookup {
        let run = {
            let mut runs = self.lock();
            // The kept part must begin `items`: up to the split's message
            // (the tail after it is run again anyway), or all of it.
            let found = runs.iter().position(|run| {
                let kept = run.kept_part();
                kept > 0
                    && kept <= items.len()
                    && seen::shared_start(&run.messages[..kept], items) == kept
            });
            let Some(run) = found.and_then(|found| runs.remove(found)) else {
                // A kept history with the same first message that this one
                // does not extend: a window that moves, or a turn whose
                // repair made new copies. It will not be extended now.
                let first = items.first().map(Bound::as_ptr);
                let (stale, live): (VecDeque<Run>, VecDeque<Run>) = std::mem::take(&mut *runs)
                    .into_iter()
                    .partition(|run| run.messages.first().map(Py::as_ptr) == first);
                *runs = live;
                drop(runs);
                if !stale.is_empty() {
                    self.firsts.useless(items.first());
                }
                drop(stale); // after the lock: dropping references may free objects
                return Lookup::None;
            };
            run
        };
        // The cheap conditions first (the kept facts and the tail alone): a
        // history they do not hold for now is kept for later.
        let Some((from, position, joints, reused, boundary)) = Self::conditions(&run, items) else {
            let blocked_at = run.split.map(|split| split.at);
            self.keep(run);
            return Lookup::Blocked(blocked_at);
        };
        // Then the walk of what is reused: dropped (not kept again) if
        // anything in it changed since.
        for (i, item) in items[..run.kept_part()].iter().enumerate() {
            let vouched = verified.at(i) && run.shapes.verified(i);
            if !vouched && !matches(item, run.shapes.get(i)) {
                return Lookup::None;
            }
        }
        for (i, &at) in run
            .built
            .iter()
            .enumerate()
            .take_while(|&(_, &at)| at < position)
        {
            if !matches(run.outputs[at].bind(py), run.built_shapes.get(i)) {
                return Lookup::None;
            }
        }
        // A copy handed out before, passed back as a message: the whole
        // funnel must judge it as the caller's own.
        if !run.built.is_empty() {
            let copies: HashSet<usize> = run
                .built
                .iter()
                .map(|&at| run.outputs[at].as_ptr() as usize)
                .collect();
            if items[from..]
                .iter()
                .any(|item| copies.contains(&(item.as_ptr() as usize)))
            {
                return Lookup::None;
            }
        }
        self.firsts.useful(items.first());
        let mut run = run;
        let called = if reused.is_empty() {
            Vec::new()
        } else {
            run.kept_calls(py, position, &reused, self.anthropic)
        };
        Lookup::Extend(Box::new(Extension {
            run,
            from,
            position,
            joints,
            called,
            boundary,
        }))
    }

    /// Where the tail starts, where its first message stands in the kept
    /// answer, the tail's joints, and the ids it uses again from before the
    /// split (each at or after the tail's first assistant message).
    fn conditions(run: &Run, items: &[Bound<'_, PyAny>]) -> Option<Conditions> {
        let Split { at: from, position } = run.split.filter(|split| split.at > 0)?;
        let joints = items[from..]
            .iter()
            .map(|item| joint(&PyJson(item.clone())).filter(|joint| !joint.system))
            .collect::<Option<Vec<Joint>>>()?;
        let reused = reused_ids(&run.ids, from, &joints)?;
        let boundary = (!reused.is_empty())
            .then(|| joints.iter().position(|joint| joint.assistant))
            .flatten();
        Some((from, position, joints, reused, boundary))
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
        verified: Verified<'_>,
    ) -> PyResult<Option<PySanitizeResult>> {
        let Extension {
            mut run,
            from,
            position,
            joints,
            called: _,
            boundary,
        } = extension;
        // The argument needs the tail's first message (a user message) kept as
        // it is; and a refused message's reason names its index in the text.
        let unsafe_change = tail.changes.iter().any(|change| {
            let change = change.get();
            change.index.is_none_or(|i| i == 0)
                || change.action == "drop_invalid"
                || (change.stage == 1 && boundary.is_some() && change.index == boundary)
        });
        if unsafe_change || !tail.system.is_none(py) {
            self.keep(run);
            return Ok(None);
        }
        let tail_messages: Vec<Py<PyAny>> =
            tail.messages.bind(py).iter().map(Bound::unbind).collect();
        let messages = PyList::new(py, run.outputs[..position].iter().chain(&tail_messages))?;
        // The kept changes from `from` on were the last tail's: this tail's replace them.
        let before: Vec<Py<PyChange>> = run
            .changes
            .iter()
            .filter(|change| change.get().index.is_none_or(|i| i < from))
            .map(|change| change.clone_ref(py))
            .collect();
        let changes = merge_changes(py, &before, &tail.changes, from)?;
        let answer = PySanitizeResult {
            messages: messages.unbind(),
            system: run.system.clone_ref(py),
            changes: changes.iter().map(|c| c.clone_ref(py)).collect(),
        };
        // The run's tail is this call's: the messages from `from` on, walked again.
        let gone = run.truncate(from);
        let mut scratch = Shape::default();
        let mut keepable = true;
        for i in from..items.len() {
            keepable = keepable
                && run.push_message(&items[i], &joints[i - from], &mut scratch, verified.at(i));
        }
        drop(gone);
        keepable =
            keepable && run.set_tail_outputs(py, position, tail_messages, from, &mut scratch);
        if keepable {
            // The answer splits at `from` (built so), and at any later turn
            // start with every change before it (its message is then in the
            // answer as it is): the latest such is taken.
            let last_change = changes.iter().filter_map(|c| c.get().index).max();
            let later = run
                .last_turn_start
                .filter(|&c| c > from && last_change.is_none_or(|m| m < c))
                .and_then(|c| run.split_at(c));
            run.split = later.or(Some(Split { at: from, position }));
            run.changes = changes;
            self.keep(run);
        }
        Ok(Some(answer))
    }

    /// `answer`, the whole funnel's for `items`, with each repaired copy
    /// that equals the copy a kept answer handed out at the same place (and
    /// the caller has not changed since) replaced by that copy: a turn the
    /// whole funnel answers still hands out the same objects, and the
    /// caches after it still hit.
    pub fn reuse_copies(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        answer: PySanitizeResult,
    ) -> PySanitizeResult {
        // A history not seen lately (one parsed afresh each turn) has no
        // copies handed out before: nothing to look up or note.
        if !self.firsts.noted(items.first()) {
            return answer;
        }
        let mut earlier: Vec<(usize, Py<PyAny>)> = {
            let runs = self.lock();
            let run = runs
                .iter()
                .filter(|run| seen::shared_start(&run.messages, items) > 0)
                .max_by_key(|run| seen::shared_start(&run.messages, items));
            run.map(|run| {
                run.built
                    .iter()
                    .enumerate()
                    .filter(|&(i, &position)| {
                        matches(run.outputs[position].bind(py), run.built_shapes.get(i))
                    })
                    .map(|(_, &position)| (position, run.outputs[position].clone_ref(py)))
                    .collect()
            })
            .unwrap_or_default()
        };
        // And the copies of the last whole answer, which may not have been
        // kept (a turn that cannot be extended is answered whole each time).
        let last = std::mem::take(&mut *self.last_copies());
        let first = items.first().map_or(0, |m| m.as_ptr() as usize);
        let same_history = last.first == first;
        earlier.extend(
            last.copies
                .iter()
                .enumerate()
                .filter(|&(i, _)| {
                    same_history && matches(last.copies[i].1.bind(py), last.shapes.get(i))
                })
                .map(|(_, (position, copy))| (*position, copy.clone_ref(py))),
        );
        let inputs: HashSet<usize> = items.iter().map(|m| m.as_ptr() as usize).collect();
        let messages = answer.messages.bind(py);
        for (position, old) in earlier {
            let Ok(new) = messages.get_item(position) else {
                continue;
            };
            let copy = !inputs.contains(&(new.as_ptr() as usize));
            let handed_back = inputs.contains(&(old.as_ptr() as usize));
            if copy && !handed_back && !new.is(&old) && same_value(&new, old.bind(py)) {
                let _ = messages.set_item(position, old);
            }
        }
        let mut copies = LastCopies {
            first,
            ..LastCopies::default()
        };
        let mut scratch = Shape::default();
        for (position, message) in messages.iter().enumerate() {
            if !inputs.contains(&(message.as_ptr() as usize))
                && copies.shapes.push(&message, &mut scratch)
            {
                copies.copies.push((position, message.unbind()));
            }
        }
        // What is replaced (another thread's copies, stored since the take
        // above) is dropped after the lock, as `last` is: dropping references
        // may free objects, and a finalizer may let the GIL go.
        let replaced = std::mem::replace(&mut *self.last_copies(), copies);
        drop((last, replaced));
        answer
    }

    fn last_copies(&self) -> std::sync::MutexGuard<'_, LastCopies> {
        self.last_copies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether remembering the answer for `items` may pay (see [`RecentFirsts`]).
    pub fn seen_before(&self, items: &[Bound<'_, PyAny>]) -> bool {
        self.firsts.seen_before(items.first())
    }

    /// After a whole run: keep the answer for `items`, split at its last
    /// turn start if that is later than `blocked_at` (where a kept one could
    /// not be extended). `tail_answer(c)` is the funnel's answer for
    /// `items[c..]` alone, asked for when the turn in progress was repaired.
    pub fn remember(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        answer: &PySanitizeResult,
        blocked_at: Option<usize>,
        tail_answer: impl Fn(usize, &[String]) -> Option<PySanitizeResult>,
        verified: Verified<'_>,
    ) {
        // A lifted system list (blocks) is the caller's to change: not kept.
        let system = answer.system.bind(py);
        let fixed_system =
            system.is_none() || system.is_exact_instance_of::<pyo3::types::PyString>();
        if items.is_empty() || items.len() > MAX_RUN || !fixed_system {
            return;
        }
        let after_block = |c: &usize| *c > 0 && blocked_at.is_none_or(|b| *c > b);
        // No turn start past the block: nothing kept could be extended.
        let last = items
            .iter()
            .rposition(|item| joint(&PyJson(item.clone())).is_some_and(|j| j.turn_start));
        if !last.is_some_and(|c| after_block(&c)) {
            return;
        }
        let mut run = Run {
            messages: Vec::with_capacity(items.len()),
            shapes: Shapes::default(),
            ids: HashMap::new(),
            first_ids: Vec::new(),
            last_turn_start: None,
            split: None,
            outputs: Vec::new(),
            built: Vec::new(),
            built_shapes: Shapes::default(),
            system: answer.system.clone_ref(py),
            changes: answer.changes.iter().map(|c| c.clone_ref(py)).collect(),
            calls_before: None,
        };
        let mut scratch = Shape::default();
        let mut turn_starts = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(joint) = joint(&PyJson(item.clone())) else {
                return;
            };
            if joint.turn_start && after_block(&i) {
                turn_starts.push(i);
            }
            if !run.push_message(item, &joint, &mut scratch, verified.at(i)) {
                return;
            }
        }
        let Some(&last) = turn_starts.last() else {
            return;
        };
        let outputs = answer.messages.bind(py).iter().map(Bound::unbind).collect();
        if !run.set_outputs(py, outputs, &mut scratch) {
            return;
        }
        let all_before = answer.changes.iter().all(|change| {
            let change = change.get();
            change
                .index
                .map_or(change.action == "insert_user", |index| index < last)
        });
        run.split = if all_before {
            run.split_at(last)
        } else {
            // The turn in progress was repaired: the split is at the last
            // turn start with nothing reported at it, among the last few.
            turn_starts
                .iter()
                .rev()
                .take(TRIED_SPLITS)
                .find_map(|&at| split_with_tail(py, &run, at, self.anthropic, &tail_answer))
        };
        if run.split.is_some() {
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
                let extended = seen::begins(&run.messages, &older.messages);
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

/// Whether `a` and `b` are the same value down to their types, key order
/// and floats' signs (Python's `==` has `1 == True == 1.0` and
/// `0.0 == -0.0`, which JSON tells apart).
fn same_value(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> bool {
    if a.is(b) {
        return true;
    }
    if !a.get_type().is(b.get_type()) {
        return false;
    }
    if let (Ok(x), Ok(y)) = (a.cast::<PyDict>(), b.cast::<PyDict>()) {
        return x.len() == y.len()
            && x.iter()
                .zip(y.iter())
                .all(|((k1, v1), (k2, v2))| same_value(&k1, &k2) && same_value(&v1, &v2));
    }
    if let (Ok(x), Ok(y)) = (a.cast::<PyList>(), b.cast::<PyList>()) {
        return x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same_value(&p, &q));
    }
    if let (Ok(x), Ok(y)) = (a.cast::<PyTuple>(), b.cast::<PyTuple>()) {
        return x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same_value(&p, &q));
    }
    if let (Ok(x), Ok(y)) = (a.cast::<PyFloat>(), b.cast::<PyFloat>()) {
        // By bits: `0.0 == -0.0`, and JSON tells them apart.
        return x.value().to_bits() == y.value().to_bits();
    }
    a.eq(b).unwrap_or(false)
}

/// The ids that messages from `at` (their `joints`) use again from before
/// `at` (`ids`: each id's first message); `None` if one comes before the
/// first assistant message there, where a result could still belong to a
/// call before `at`.
fn reused_ids(ids: &HashMap<String, usize>, at: usize, joints: &[Joint]) -> Option<Vec<String>> {
    let mut reused = Vec::new();
    let mut past_assistant = false;
    for joint in joints {
        past_assistant |= joint.assistant;
        for id in &joint.ids {
            if ids.get(id).is_some_and(|&first| first < at) {
                if !past_assistant {
                    return None;
                }
                reused.push(id.clone());
            }
        }
    }
    Some(reused)
}

/// Where `run`'s answer splits at turn start `at` when the turn in progress
/// was repaired: the argument holds if nothing is reported at `at` itself
/// (it was not merged into what came before) and the tail's ids and roles
/// allow it, checked at each extension. The tail's own answer (`tail_answer`)
/// says where its part begins, and must be the kept answer's end: the same
/// messages and, renumbered, the same changes.
fn split_with_tail(
    py: Python<'_>,
    run: &Run,
    at: usize,
    anthropic: bool,
    tail_answer: &impl Fn(usize, &[String]) -> Option<PySanitizeResult>,
) -> Option<Split> {
    let changes = || run.changes.iter().map(Py::get);
    // An inserted first user message stands before everything: the part
    // before `at` has it.
    if changes().any(|change| change.index.is_none() && change.action != "insert_user") {
        return None;
    }
    let kept_tail: Vec<&PyChange> = changes()
        .filter(|change| change.index.is_some_and(|i| i >= at))
        .collect();
    if kept_tail
        .iter()
        .any(|change| change.index == Some(at) || change.action == "drop_invalid")
    {
        return None;
    }
    // A call reusing an id from before `at`: the tail runs with the calls
    // the answer keeps of those ids as made (if one was kept after `at`
    // instead, the answers differ below and there is no split).
    let joints = run.messages[at..]
        .iter()
        .map(|message| joint(&PyJson(message.bind(py).clone())).filter(|joint| !joint.system))
        .collect::<Option<Vec<Joint>>>()?;
    let reused = reused_ids(&run.ids, at, &joints)?;
    let called: Vec<String> = if reused.is_empty() {
        Vec::new()
    } else {
        let kept: HashSet<String> = run
            .outputs
            .iter()
            .flat_map(|output| called_ids(&PyJson(output.bind(py).clone()), anthropic))
            .collect();
        reused.into_iter().filter(|id| kept.contains(id)).collect()
    };
    let tail = tail_answer(at, &called)?;
    if !tail.system.is_none(py) {
        return None;
    }
    let tail_messages = tail.messages.bind(py);
    let position = run.outputs.len().checked_sub(tail_messages.len())?;
    let same_messages = run.outputs[position..]
        .iter()
        .zip(tail_messages.iter())
        .all(|(kept, new)| kept.bind(py).eq(&new).unwrap_or(false));
    let same_changes = kept_tail.len() == tail.changes.len()
        && kept_tail
            .iter()
            .zip(&tail.changes)
            .all(|(kept, new)| **kept == new.get().shifted(at));
    (same_messages && same_changes).then_some(Split { at, position })
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
