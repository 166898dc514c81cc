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

use super::MessageLog;
use super::window::{Record, View};
use crate::select::{Unit, for_each_unit_from};

/// What a policy weighs units by while grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Weighing {
    /// Not at all (NaN): ShapeHistory.
    #[default]
    Unweighed,
    /// The priority given at append: the priority builder.
    Priority,
}

/// The final units of a plain view, nodes `0..nodes`.
#[derive(Debug, Default)]
pub(super) struct StableUnits {
    cap: Option<usize>,
    weighing: Weighing,
    nodes: usize,
    units: Vec<Unit>,
}

impl StableUnits {
    fn reset(&mut self, cap: Option<usize>, weighing: Weighing) {
        self.cap = cap;
        self.weighing = weighing;
        self.nodes = 0;
        self.units.clear();
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
        let mut stable = std::mem::take(&mut self.stable_units);
        let plain = matches!(view, View::All(_));
        if !plain || stable.cap != cap || stable.weighing != weighing || stable.nodes > view.len() {
            stable.reset(cap, weighing);
        }
        for unit in &stable.units {
            emit(unit.clone());
        }
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
                emit(unit);
            },
        );
        // Without a turn in progress the last unit may still grow (results
        // to come): nothing new is final then.
        if let (true, Some(from)) = (plain, held_from) {
            stable.units.append(&mut fresh);
            stable.nodes = from;
        }
        if !plain {
            stable.units = Vec::new(); // a view with summaries: not kept
        }
        self.stable_units = stable;
    }
}
