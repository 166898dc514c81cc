//! The units of a plain log's view that no append can change, kept between
//! selections, so a turn groups only the messages since the turn in
//! progress began, not a million headers.
//!
//! A unit before the turn in progress is final: the message that starts that
//! turn ended it, and a record never changes once appended. So on a plain
//! log (one chain, no summaries: its view is every node), the units up to
//! where the turn in progress began are those of any later pass too, for the
//! same cap (the tokens a cut result counts) and the same weighing (the
//! priority builder's weights, or none). Anything else (a view with
//! summaries or branches, another cap or weighing, a shorter view) groups
//! the view whole, as before.
//!
//! Each weighing keeps its own units: a handle that alternates policies
//! (the priority builder on one call, a window on the next) parks the
//! other weighing's units rather than grouping a million headers again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::MessageLog;
use super::choose::priority_class;
use super::fewest::Fewest;
use super::window::{Record, View};
use crate::select::{Role, ShapeUnits, Unit, UnitKind, for_each_unit_from};

/// What a policy weighs units by while grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Weighing {
    /// Not at all (NaN): ShapeHistory.
    #[default]
    Unweighed,
    /// The priority given at append: the priority builder.
    Priority,
}

/// The next reset's generation (0 is a new, empty set's).
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// The final units of a plain view, nodes `0..nodes`.
#[derive(Debug, Default)]
pub(super) struct StableUnits {
    cap: Option<usize>,
    weighing: Weighing,
    nodes: usize,
    /// The view's holes when the units were grouped (see [`View::All`]):
    /// a rewind into the nodes they cover moves those nodes' seqs.
    gaps: Vec<usize>,
    units: Vec<Unit>,
    /// Changes at each reset, never repeating across a process's units
    /// (a parked set and the active one never share one), so an index
    /// built over these units (the weighted window's) knows when to start
    /// again.
    pub(super) generation: u64,
    /// The units' tokens, summed; the system and pinned ones; where turns start.
    tokens: usize,
    fixed: Vec<usize>,
    turn_starts: Vec<usize>,
    /// For the priority builder: the units in its order classes.
    pub(super) by_priority: PriorityClasses,
    /// Whether a unit was grouped with a stand-in's count (see `stand_in`).
    stood_in: bool,
}

impl StableUnits {
    fn reset(&mut self, cap: Option<usize>, weighing: Weighing) {
        self.cap = cap;
        self.weighing = weighing;
        self.nodes = 0;
        self.gaps.clear();
        self.generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
        self.units.clear();
        self.tokens = 0;
        self.fixed.clear();
        self.turn_starts.clear();
        self.by_priority = PriorityClasses::default();
        self.stood_in = false;
    }

    pub(super) fn len(&self) -> usize {
        self.units.len()
    }

    pub(super) fn unit(&self, n: usize) -> &Unit {
        &self.units[n]
    }

    fn push(&mut self, unit: Unit) {
        let number = self.units.len();
        if self.weighing == Weighing::Priority {
            self.by_priority.push(number, &unit);
        }
        self.tokens += unit.tokens;
        if unit.kind != UnitKind::Normal {
            self.fixed.push(number);
        }
        if unit.turn_start {
            self.turn_starts.push(number);
        }
        self.units.push(unit);
    }

    /// These units and then `held` (the turn in progress's), as ShapeHistory
    /// reads them.
    pub(super) fn with_held<'a>(&'a self, held: &'a [Unit]) -> KeptAndHeld<'a> {
        KeptAndHeld {
            kept: self,
            held,
            held_turns: (0..held.len()).filter(|&k| held[k].turn_start).collect(),
        }
    }
}

/// The kept units followed by the turn in progress's, numbered on.
pub(super) struct KeptAndHeld<'a> {
    kept: &'a StableUnits,
    held: &'a [Unit],
    held_turns: Vec<usize>,
}

impl KeptAndHeld<'_> {
    /// The units every policy keeps, by number, in order.
    pub(super) fn fixed(&self) -> Vec<(usize, Unit)> {
        self.mandatory()
            .into_iter()
            .map(|n| (n, self.unit(n).clone()))
            .collect()
    }

    /// Unit `n`'s nodes.
    pub(super) fn span(&self, n: usize) -> (usize, usize) {
        let unit = self.unit(n);
        (unit.start, unit.end)
    }
}

impl ShapeUnits for KeptAndHeld<'_> {
    fn count(&self) -> usize {
        self.kept.units.len() + self.held.len()
    }
    fn unit(&self, n: usize) -> &Unit {
        match n.checked_sub(self.kept.units.len()) {
            Some(k) => &self.held[k],
            None => &self.kept.units[n],
        }
    }
    fn tokens(&self) -> usize {
        self.kept.tokens + self.held.iter().map(|u| u.tokens).sum::<usize>()
    }
    fn mandatory(&self) -> Vec<usize> {
        let first_held = self.kept.units.len();
        let held = (0..self.held.len()).filter(|&k| self.held[k].kind != UnitKind::Normal);
        let mut all = self.kept.fixed.clone();
        all.extend(held.map(|k| first_held + k));
        all
    }
    fn turns(&self) -> usize {
        self.kept.turn_starts.len() + self.held_turns.len()
    }
    fn turn_start(&self, k: usize) -> usize {
        match k.checked_sub(self.kept.turn_starts.len()) {
            Some(h) => self.kept.units.len() + self.held_turns[h],
            None => self.kept.turn_starts[k],
        }
    }
}

/// The final units as the priority builder orders them: all of one class
/// (one priority, with or without a constraint) before the next, and
/// within a class the newest first. Kept as each class's units, oldest
/// first, with an index of their tokens, so a turn fills the budget class
/// by class, from the newest unit that fits, without ordering every unit.
#[derive(Debug, Default)]
pub(super) struct PriorityClasses {
    /// By class (heaviest last): the class's unit numbers and their tokens.
    pub(super) classes: BTreeMap<u64, (Vec<u32>, Fewest)>,
}

impl PriorityClasses {
    fn push(&mut self, number: usize, unit: &Unit) {
        if unit.kind == UnitKind::Normal {
            let (units, fewest) = self.classes.entry(priority_class(unit)).or_default();
            units.push(u32::try_from(number).expect("a view of under 2^32 nodes"));
            fewest.push(u32::try_from(unit.tokens).unwrap_or(u32::MAX));
        }
    }
}

impl MessageLog {
    /// Every unit of `view`, in order, to `emit`, as
    /// [`crate::select::for_each_unit`] groups them (each weighing `weigh`
    /// of its heaviest node): the final ones of a plain view from the last
    /// call, the rest grouped now.
    pub(super) fn for_each_view_unit(
        &mut self,
        view: &View,
        cap: Option<usize>,
        weighing: Weighing,
        weigh: impl Fn(Record<'_>, usize) -> f64,
        mut emit: impl FnMut(Unit),
    ) {
        self.keep_stable_units(view, cap, weighing);
        for unit in &self.stable_units.units {
            emit(unit.clone());
        }
        self.extend_stable_units(view, cap, weigh, |unit, _| emit(unit));
    }

    /// Whether the view's `i`-th node starts a turn, as grouping into units
    /// decides from its header (a user message with text, not results).
    fn starts_turn(&self, view: &View, i: usize) -> bool {
        i < view.len() && {
            let facts = self.record(view.seq(i)).facts();
            facts.role == Role::User && facts.has_text && !facts.results
        }
    }

    /// Start the kept units again unless they are this view's, for this cap
    /// and weighing.
    pub(super) fn keep_stable_units(
        &mut self,
        view: &View,
        cap: Option<usize>,
        weighing: Weighing,
    ) {
        if self.stable_units.weighing != weighing {
            // The other weighing's units wait in the parked set; these go there.
            std::mem::swap(&mut self.stable_units, &mut self.parked_units);
        }
        let nodes = self.stable_units.nodes;
        let moved = match view {
            View::All(_, gaps) => match first_changed_gap(&self.stable_units.gaps, gaps) {
                // A node the kept units cover is at another seq.
                Some(gap) if gap < nodes => true,
                // The node that ended them (the next turn's start) is gone:
                // they hold if another turn starts in its place (a failed
                // turn's input taken back, the next input appended), else
                // the last of them may grow or be the turn in progress.
                Some(gap) if gap == nodes => !self.starts_turn(view, nodes),
                _ => false,
            },
            View::Listed(..) => true,
        };
        // Units that reach a stood-in record were counted otherwise.
        let stood_in = self
            .first_stand_in()
            .is_some_and(|first| nodes > 0 && nodes <= view.len() && view.seq(nodes - 1) >= first);
        let stable = &mut self.stable_units;
        let plain = view.is_plain();
        if !plain
            || moved
            || stood_in
            || stable.stood_in
            || stable.cap != cap
            || stable.weighing != weighing
            || stable.nodes > view.len()
        {
            stable.reset(cap, weighing);
        }
        if let View::All(_, gaps) = view {
            stable.gaps.clone_from(gaps);
        }
        if !plain {
            stable.units = Vec::new(); // a view with summaries: not kept
        }
    }

    /// Group the view from where the kept units end, each unit to `emit`
    /// with whether it is the turn in progress's; the final ones join the
    /// kept units when there is a turn in progress (else the last unit may
    /// still grow).
    pub(super) fn extend_stable_units(
        &mut self,
        view: &View,
        cap: Option<usize>,
        weigh: impl Fn(Record<'_>, usize) -> f64,
        mut emit: impl FnMut(Unit, bool),
    ) {
        let mut stable = std::mem::take(&mut self.stable_units);
        let plain = view.is_plain();
        let mut fresh: Vec<Unit> = Vec::new();
        let mut held_from = None;
        for_each_unit_from(
            stable.nodes,
            view.len(),
            self.facts_of(view, cap, weigh),
            |unit, held| {
                if held {
                    held_from.get_or_insert(unit.start);
                } else if plain {
                    fresh.push(unit.clone());
                }
                emit(unit, held);
            },
        );
        if let (true, Some(from)) = (plain, held_from) {
            for unit in fresh {
                stable.push(unit);
            }
            stable.nodes = from;
            // Kept units that hold a stood-in record serve this selection
            // only: the next groups them again.
            if self
                .first_stand_in()
                .is_some_and(|first| from > 0 && view.seq(from - 1) >= first)
            {
                stable.stood_in = true;
            }
        }
        self.stable_units = stable;
    }
}

/// The least place (as [`View::All`] gives them) where holes `before` and
/// holes `now` differ, if they do: the nodes before it are at the same
/// seqs either way.
fn first_changed_gap(before: &[usize], now: &[usize]) -> Option<usize> {
    let same = before.iter().zip(now).take_while(|(a, b)| a == b).count();
    [before.get(same), now.get(same)]
        .into_iter()
        .flatten()
        .min()
        .copied()
}
