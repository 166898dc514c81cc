//! The weighted window on a long plain log without weighing every node.
//!
//! Weights move with the clock, but not their order within one class of node:
//! untagged nodes all weigh `decay ^ age`, and the nodes of one tag all weigh
//! that tag's weight times `tag_decay ^ age`, so (with the weights at least 0
//! and the decays in [0, 1]) a newer node of a class never weighs less than
//! an older one. A unit weighs its heaviest node, which is, class by class,
//! its newest; nodes given a weight at append keep it.
//!
//! So the handle keeps, for each class, the final units of a plain view that
//! hold a node of it (those before the turn in progress: no append changes
//! them), oldest first, with that class's newest node; and the units with a
//! given weight, by weight. A selection merges these lists newest first,
//! weighing only the heads it reaches, and takes each unit the first time it
//! comes up (at its heaviest) wherever it fits. Units too large for the room
//! left are passed over a block at a time (each list keeps the fewest tokens
//! of each block of 64 entries, of 64 blocks, and so on), and the merge ends
//! when no list holds one that fits. A turn on a million-message log then
//! weighs about as many units as it keeps.
//!
//! Where the order could differ this is not used and every node is weighed,
//! as before: ages from timestamps that go back somewhere in the log, a
//! negative tag weight or a decay outside [0, 1], a view with summaries or
//! branches, or no turn in progress (the last unit may still grow). Within
//! the merge each list's weights are checked to fall as it goes; if one ever
//! rose (a rounding of `exp` that is not monotonic), the full sweep answers.

use std::collections::BTreeSet;

use super::MessageLog;
use super::fewest::Fewest;
use super::stable::{KeptAndHeld, StableUnits, Weighing};
use super::window::{View, Weigher, Window, mandatory_cost};
use crate::error::Result;
use crate::select::{Role, ShapeUnits, Unit, UnitKind, Weights, recent_fits, weight_key};
use crate::tags::{CONSTRAINT, EVIDENCE, LOG, PULSE};

/// The tags in the order a node's weight takes the first it has (as
/// [`crate::select::tag_weight`] reads them); class 0 is untagged.
const TAG_ORDER: [u8; 4] = [CONSTRAINT, EVIDENCE, PULSE, LOG];
const CLASSES: usize = 1 + TAG_ORDER.len();

/// A node's class: 0 untagged, else 1 + the index of its first tag.
fn class_of(tags: u8) -> usize {
    TAG_ORDER
        .iter()
        .position(|&tag| tags & tag != 0)
        .map_or(0, |i| i + 1)
}

/// The weight a class's decay multiplies (`None`: untagged, 1 undecayed).
fn class_weight(class: usize, weights: &Weights) -> Option<f64> {
    [
        None,
        Some(weights.constraint),
        Some(weights.evidence),
        Some(weights.pulse),
        Some(weights.log),
    ][class]
}

/// Whether newer nodes of a class never weigh less under `weights`.
fn order_kept_by(weights: &Weights) -> bool {
    let decays = [weights.decay, weights.tag_decay];
    let tags = [
        weights.constraint,
        weights.evidence,
        weights.pulse,
        weights.log,
    ];
    decays.iter().all(|d| (0.0..=1.0).contains(d))
        && tags.iter().all(|w| w.is_finite() && *w >= 0.0)
}

/// A unit in one class's list: its newest node of that class.
#[derive(Clone, Copy, Debug)]
struct Entry {
    unit: u32,
    /// The node's place in the view and its timestamp.
    index: u32,
    at: f64,
}

/// The weighted window's index over the handle's kept units (see
/// `stable`): per class, the units holding a node of it; the units with a
/// weight of their own; the constraint units (the first are the anchors).
#[derive(Debug, Default)]
pub(super) struct WeighedUnits {
    /// The kept units' generation this indexes, and how many of them;
    /// `started` once set up (a new index is never taken for one over a
    /// new, still unreset set of units, whose generation is also 0).
    generation: u64,
    indexed: usize,
    started: bool,
    /// The last timestamp seen, and whether none before it was later.
    last_at: f64,
    timestamps_rise: bool,
    /// A unit's tokens did not fit in 32 bits: the full sweep counts it.
    oversized: bool,
    /// Normal units tagged constraint, in order.
    constraints: Vec<u32>,
    classes: [Vec<Entry>; CLASSES],
    fewest: [Fewest; CLASSES],
    /// Units with a node given its weight at append: the heaviest such
    /// node's [`weight_key`].
    given: BTreeSet<u128>,
    given_floor: u32,
    /// Per unit, set once it is kept or passed over in a selection.
    seen: Vec<u64>,
}

impl WeighedUnits {
    /// Index the kept units not yet indexed (all of them, after a reset), of
    /// the plain `view`.
    fn catch_up(&mut self, log: &MessageLog, view: &View, kept: &StableUnits) {
        if !self.started || self.generation != kept.generation || self.indexed > kept.len() {
            *self = Self {
                generation: kept.generation,
                started: true,
                timestamps_rise: true,
                last_at: f64::NEG_INFINITY,
                given_floor: u32::MAX,
                ..Self::default()
            };
        }
        for number in self.indexed..kept.len() {
            self.push(log, view, number, kept.unit(number));
        }
        self.indexed = kept.len();
    }

    /// Index final unit `number`, reading its nodes' headers.
    fn push(&mut self, log: &MessageLog, view: &View, number: usize, unit: &Unit) {
        let number32 = u32::try_from(number).expect("a view of under 2^32 nodes");
        let tokens = u32::try_from(unit.tokens).unwrap_or_else(|_| {
            self.oversized = true;
            u32::MAX
        });
        let normal = unit.kind == UnitKind::Normal;
        if normal && unit.tags & CONSTRAINT != 0 {
            self.constraints.push(number32);
        }
        let mut newest: [Option<(u32, f64)>; CLASSES] = [None; CLASSES];
        let mut given: Option<f64> = None;
        for i in unit.start..unit.end {
            let record = log.record(view.seq(i));
            let at = record.timestamp();
            // NaN or earlier than a node before it: ages from timestamps
            // would not keep each class's order.
            if at.is_nan() || at < self.last_at {
                self.timestamps_rise = false;
            }
            self.last_at = at;
            if let Some(weight) = record.weight() {
                given = Some(given.map_or(weight, |g| g.max(weight)));
            } else if record.role() != Role::System {
                newest[class_of(record.tags())] = Some((i as u32, at));
            }
        }
        if !normal {
            return; // kept whatever it weighs
        }
        for (class, newest) in newest.iter().enumerate() {
            if let Some((index, at)) = *newest {
                self.classes[class].push(Entry {
                    unit: number32,
                    index,
                    at,
                });
                self.fewest[class].push(tokens);
            }
        }
        if let Some(weight) = given {
            self.given
                .insert(weight_key(weight, number, tokens as usize));
            self.given_floor = self.given_floor.min(tokens);
        }
    }

    fn is_seen(&self, unit: usize) -> bool {
        self.seen[unit / 64] & (1 << (unit % 64)) != 0
    }

    fn see(&mut self, unit: usize) {
        self.seen[unit / 64] |= 1 << (unit % 64);
    }
}

/// Where the merge has got to in one list: the entries before `left` are
/// still to come; `head` is the one last reached, weighed, not yet taken.
struct Cursor {
    left: usize,
    head: Option<(u128, f64)>,
}

impl MessageLog {
    /// The weighted window from the kept units' lists (see the module's
    /// doc), as the full sweep would choose it; `None` where the full sweep
    /// must answer. Ages from `now`, else the whole-minute tables, which the
    /// caller has prepared for the view.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn weighted_from_kept_units(
        &mut self,
        view: &View,
        budget: usize,
        weights: &Weights,
        max_anchors: usize,
        recent_turns: usize,
        now: Option<f64>,
        cap: Option<usize>,
    ) -> Option<Result<Window>> {
        if !view.is_plain() {
            self.weighed = WeighedUnits::default(); // not kept for a view with summaries
            return None;
        }
        if !order_kept_by(weights) {
            return None;
        }
        // The units as ShapeHistory groups them (weights play no part), kept
        // between calls; this index over them grows with them.
        self.keep_stable_units(view, cap, Weighing::Unweighed);
        let mut held = Vec::new();
        self.extend_stable_units(
            view,
            cap,
            |_, _| f64::NAN,
            |unit, in_progress| {
                if in_progress {
                    held.push(unit);
                }
            },
        );
        let mut index = std::mem::take(&mut self.weighed);
        index.catch_up(self, view, &self.stable_units);
        let usable =
            !(held.is_empty() || index.oversized || (now.is_some() && !index.timestamps_rise));
        let answer =
            usable.then(|| {
                let weigher = Weigher::new(
                    weights,
                    now,
                    view.len(),
                    &self.decay_powers.powers,
                    &self.tag_decay_powers.powers,
                );
                let units = self.stable_units.with_held(&held);
                let chosen = Choice {
                    units: &units,
                    index: &mut index,
                    weights,
                    weigher: &weigher,
                    budget,
                }
                .choose(max_anchors, recent_turns)?;
                Some(chosen.map(|(kept, fixed)| {
                    self.window_of(&kept, |n| units.span(n), &fixed, view, cap)
                }))
            });
        self.weighed = index;
        answer.flatten()
    }
}

/// One selection over the kept units and the turn in progress.
struct Choice<'a> {
    /// The kept units, then the turn in progress's.
    units: &'a KeptAndHeld<'a>,
    index: &'a mut WeighedUnits,
    weights: &'a Weights,
    weigher: &'a Weigher<'a>,
    budget: usize,
}

impl Choice<'_> {
    /// The kept unit numbers in order and the fixed units (for the layout),
    /// as the full sweep's `choose` picks them; `None` if a list's weights
    /// rose along it.
    #[allow(clippy::type_complexity)]
    fn choose(
        mut self,
        max_anchors: usize,
        recent_turns: usize,
    ) -> Option<Result<(Vec<usize>, Vec<(usize, Unit)>)>> {
        let stable = self.index.indexed;
        let fixed = self.units.fixed();
        let mut cost = match mandatory_cost(&fixed, self.budget) {
            Ok(cost) => cost,
            Err(error) => return Some(Err(error)),
        };
        let mut kept: Vec<usize> = fixed.iter().map(|(n, _)| *n).collect();
        self.index.seen.clear();
        self.index.seen.resize(stable.div_ceil(64), 0);
        // The anchors: the first constraint units, wherever they fit; the
        // ones that do not fit compete no further.
        let anchors = self.index.constraints.len().min(max_anchors);
        for a in 0..anchors {
            let n = self.index.constraints[a] as usize;
            let tokens = self.units.unit(n).tokens;
            if cost + tokens <= self.budget {
                cost += tokens;
                kept.push(n);
            }
            self.index.see(n);
        }
        // The newest turns, newest first, within half the budget.
        let recent = self.recent(recent_turns);
        let mut recent_cost = 0;
        for n in (recent..stable).rev() {
            let unit = self.units.unit(n);
            if unit.kind != UnitKind::Normal || self.index.is_seen(n) {
                continue;
            }
            if recent_fits(recent_cost, unit.tokens, cost, self.budget) {
                cost += unit.tokens;
                recent_cost += unit.tokens;
                kept.push(n);
                self.index.see(n);
            }
        }
        if !self.fill_by_weight(&mut cost, &mut kept) {
            return None;
        }
        kept.sort_unstable();
        Some(Ok((kept, fixed)))
    }

    /// The first unit of the newest `recent_turns` turns (the turn in
    /// progress among them); past every unit if there are none.
    fn recent(&self, recent_turns: usize) -> usize {
        let turns = self.units.turns();
        if recent_turns == 0 || turns == 0 {
            return self.units.count();
        }
        self.units.turn_start(turns - recent_turns.min(turns))
    }

    /// Take the units not yet seen in weight order wherever they fit;
    /// `false` if a list's weights rose along it.
    fn fill_by_weight(&mut self, cost: &mut usize, kept: &mut Vec<usize>) -> bool {
        let given = std::mem::take(&mut self.index.given);
        let ordered = self.merge(&given, cost, kept);
        self.index.given = given;
        ordered
    }

    fn merge(&mut self, given: &BTreeSet<u128>, cost: &mut usize, kept: &mut Vec<usize>) -> bool {
        let mut cursors: Vec<Cursor> = (0..CLASSES)
            .map(|class| Cursor {
                left: self.index.classes[class].len(),
                head: None,
            })
            .collect();
        for (class, cursor) in cursors.iter_mut().enumerate() {
            self.advance(class, cursor, self.budget - *cost);
        }
        let mut given = given.iter().rev().copied().peekable();
        loop {
            let room = self.budget - *cost;
            // Units given a weight are few: walked in order while any could fit.
            let next_given = if self.index.given_floor as usize <= room {
                given.peek().copied()
            } else {
                None
            };
            let best = cursors
                .iter()
                .enumerate()
                .filter_map(|(class, c)| c.head.map(|(key, _)| (class, key)))
                .max_by_key(|&(_, key)| key);
            let key = match (best, next_given) {
                (Some((_, key)), Some(g)) if g > key => given.next().expect("peeked"),
                (Some((class, key)), _) => {
                    let before = cursors[class].head.expect("a head").1;
                    self.advance(class, &mut cursors[class], room);
                    if cursors[class].head.is_some_and(|(_, w)| w > before) {
                        return false;
                    }
                    key
                }
                (None, Some(_)) => given.next().expect("peeked"),
                (None, None) => return true, // nothing still to come can fit
            };
            let unit = (key >> 32) as u32 as usize;
            if self.index.is_seen(unit) {
                continue; // came up before, at least as heavy
            }
            self.index.see(unit);
            let tokens = key as u32 as usize;
            if tokens <= room {
                *cost += tokens;
                kept.push(unit);
            }
        }
    }

    /// Move `class`'s head to the newest entry still to come that `room`
    /// tokens can hold, weighed (the ones passed over never fit: the room
    /// only shrinks).
    fn advance(&self, class: usize, cursor: &mut Cursor, room: usize) {
        let most = u32::try_from(room).unwrap_or(u32::MAX);
        let found = match cursor.left {
            0 => None,
            left => self.index.fewest[class].last_at_most(left - 1, most),
        };
        let Some(at) = found else {
            (cursor.left, cursor.head) = (0, None);
            return;
        };
        cursor.left = at;
        let entry = self.index.classes[class][at];
        let weight = self.weigher.decaying(
            class_weight(class, self.weights),
            entry.at,
            entry.index as usize,
        );
        let unit = entry.unit as usize;
        let key = weight_key(weight, unit, self.units.unit(unit).tokens);
        cursor.head = Some((key, weight + 0.0));
    }
}

#[cfg(test)]
mod tests {
    use super::{CLASSES, class_of, class_weight};
    use crate::select::{Weights, tag_weight};

    #[test]
    fn a_class_weighs_what_its_first_tag_does() {
        let weights = Weights::default();
        for tags in 0..=u8::MAX {
            let class = class_of(tags);
            assert!(class < CLASSES);
            assert_eq!(
                class_weight(class, &weights),
                tag_weight(tags, &weights),
                "{tags:#b}"
            );
        }
    }
}
