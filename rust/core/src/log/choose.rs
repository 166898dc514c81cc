//! ShapeHistory and the priority builder on a log, from the mapped headers
//! alone, as the weighted window chooses (`window`): the context view's
//! nodes grouped into units, the policy's kernel run on them, and only the
//! kept nodes' payloads ever read (by the caller, who lays them out).

use super::MessageLog;
use super::format::FLAG_PINNED;
use super::stable::Weighing;
use super::window::mandatory_cost;
use super::window::{Record, View, Window, spans};
use crate::error::Result;
use crate::select::{
    Build, Extras, Shape, ShapeUnits, Unit, UnitKind, Walked, build_extras, fill_by_weight,
    shape_of,
};
use crate::tags::CONSTRAINT;

impl MessageLog {
    /// The context view's units, counted as a policy with `cap` counts
    /// them, each weighing `weigh` of its heaviest node, into `units`.
    fn view_units(&mut self, view: &View, cap: Option<usize>, units: &mut Vec<Unit>) {
        units.clear();
        self.for_each_view_unit(
            view,
            cap,
            Weighing::Unweighed,
            |_, _| f64::NAN,
            |unit| {
                units.push(unit);
            },
        );
    }

    /// ShapeHistory over the context view, as [`crate::select::shape`]
    /// chooses: the kept nodes, the turns kept (`None`: everything fit) and
    /// whether the summary of `summary_tokens` goes in. `None` where a
    /// result over `cap` has no capped count yet (see `capped`).
    pub fn shape_window(
        &mut self,
        budget: usize,
        keep_last: usize,
        min_keep: usize,
        summary_tokens: Option<usize>,
        cap: Option<usize>,
    ) -> Result<Option<(Window, Shape)>> {
        let view = self.compact_view()?;
        if self.uncounted(cap) {
            return Ok(None);
        }
        // A plain view with a turn in progress: the kept units and the
        // turn's, without handing every unit on (see `stable`).
        let mut held = Vec::new();
        if view.is_plain() {
            self.keep_stable_units(&view, cap, Weighing::Unweighed);
            self.extend_stable_units(
                &view,
                cap,
                |_, _| f64::NAN,
                |unit, in_progress| {
                    if in_progress {
                        held.push(unit);
                    }
                },
            );
        }
        let (chosen, window) = if held.is_empty() {
            let mut units = std::mem::take(&mut self.scratch_units);
            self.view_units(&view, cap, &mut units);
            let chosen = self.shape_of_units(
                &Walked::new(&units),
                &view,
                budget,
                keep_last,
                min_keep,
                summary_tokens,
            );
            self.scratch_units = units;
            chosen
        } else {
            let units = self.stable_units.with_held(&held);
            self.shape_of_units(&units, &view, budget, keep_last, min_keep, summary_tokens)
        };
        let (window, shape) = (window?, chosen?);
        Ok(Some((
            Window {
                view: view.into(),
                ..window
            },
            shape,
        )))
    }

    /// The priority builder over the context view, as
    /// [`crate::select::build`] chooses: mandatory units, the extras of
    /// `extras` in their shares, then the other units by their `priority`
    /// (given at append), constraints next, the newest first. One sweep
    /// keeps only each unit's order key and start (20 bytes), as the
    /// weighted window does. `None` as for [`MessageLog::shape_window`].
    pub fn priority_window(
        &mut self,
        budget: usize,
        extras: &Extras,
        cap: Option<usize>,
    ) -> Result<Option<(Window, Build)>> {
        let view = self.compact_view()?;
        if self.uncounted(cap) {
            return Ok(None);
        }
        if let Some(chosen) = self.priority_by_class(&view, budget, extras, cap) {
            let (window, build) = chosen?;
            return Ok(Some((
                Window {
                    view: view.into(),
                    ..window
                },
                build,
            )));
        }
        let mut keys = std::mem::take(&mut self.scratch_keys);
        let mut starts = std::mem::take(&mut self.scratch_starts);
        keys.clear();
        starts.clear();
        let mut fixed: Vec<(usize, Unit)> = Vec::new();
        let mut number = 0;
        let priority = |record: Record<'_>, _| record.priority();
        self.for_each_view_unit(&view, cap, Weighing::Priority, priority, |unit| {
            starts.push(u32::try_from(unit.start).expect("a view of under 2^32 nodes"));
            if unit.kind == UnitKind::Normal {
                keys.push(priority_key(&unit, number));
            } else {
                fixed.push((number, unit));
            }
            number += 1;
        });
        let chosen = mandatory_cost(&fixed, budget).map(|mut cost| {
            let mut build = build_extras(budget, extras, &mut cost);
            let mut kept: Vec<usize> = fixed.iter().map(|(n, _)| *n).collect();
            fill_by_weight(&mut keys, budget, &mut cost, &mut kept);
            kept.sort_unstable();
            build.units = kept;
            build
        });
        let window = chosen.as_ref().map(|build| {
            self.window_of(&build.units, spans(&starts, view.len()), &fixed, &view, cap)
        });
        self.scratch_keys = keys;
        self.scratch_starts = starts;
        let (window, build) = (window.map_err(Clone::clone)?, chosen?);
        Ok(Some((
            Window {
                view: view.into(),
                ..window
            },
            build,
        )))
    }
}

/// The class of a unit in the priority builder's order: the high bits of
/// its [`priority_key`] (its priority, then whether it is a constraint).
/// All of one class come before the next, newest first within it.
pub(super) fn priority_class(unit: &Unit) -> u64 {
    (priority_key(unit, 0) >> 95) as u64
}

/// The priority builder's order as one integer per unit, for
/// [`fill_by_weight`]: the priority's order-preserving bits (a header holds
/// an `f32`, so the unit's heaviest is one exactly), a constraint next, then
/// the unit number (newer first) and its tokens in the low 32 bits.
fn priority_key(unit: &Unit, number: usize) -> u128 {
    // The heaviest of f32 priorities, or -inf for none: exact as an f32.
    #[allow(clippy::cast_possible_truncation)]
    let bits = (unit.weight as f32).to_bits();
    let ordered = if bits >> 31 == 1 {
        !bits
    } else {
        bits | (1 << 31)
    };
    let constraint = u128::from(unit.tags & CONSTRAINT != 0);
    let number = u32::try_from(number).expect("a view of under 2^32 nodes");
    let tokens = u32::try_from(unit.tokens).unwrap_or(u32::MAX);
    (u128::from(ordered) << 96)
        | (constraint << 95)
        | (u128::from(number) << 32)
        | u128::from(tokens)
}

/// Past this many priority classes among the kept units, filling class by
/// class costs more than ordering the units: the priority builder sweeps.
const MOST_CLASSES: usize = 256;

impl MessageLog {
    /// The priority builder from the kept units' classes (see
    /// [`super::stable::PriorityClasses`]): the same choice as the sweep
    /// below, without ordering every unit. `None` where the sweep answers:
    /// a view with summaries or branches, no turn in progress, or more
    /// than [`MOST_CLASSES`] classes.
    fn priority_by_class(
        &mut self,
        view: &View,
        budget: usize,
        extras: &Extras,
        cap: Option<usize>,
    ) -> Option<Result<(Window, Build)>> {
        if !view.is_plain() {
            return None;
        }
        self.keep_stable_units(view, cap, Weighing::Priority);
        let mut held = Vec::new();
        let priority = |record: Record<'_>, _| record.priority();
        self.extend_stable_units(view, cap, priority, |unit, in_progress| {
            if in_progress {
                held.push(unit);
            }
        });
        let stable = &self.stable_units;
        let classes = &stable.by_priority.classes;
        (!held.is_empty() && classes.len() <= MOST_CLASSES).then(|| {
            let units = stable.with_held(&held);
            let fixed = units.fixed();
            let mut cost = mandatory_cost(&fixed, budget)?;
            let mut build = build_extras(budget, extras, &mut cost);
            let mut kept: Vec<usize> = fixed.iter().map(|(n, _)| *n).collect();
            // Heaviest class first; in each, from the newest unit that fits.
            for (members, fewest) in classes.values().rev() {
                let mut before = members.len();
                while before > 0 {
                    let room = u32::try_from(budget - cost).unwrap_or(u32::MAX);
                    let Some(at) = fewest.last_at_most(before - 1, room) else {
                        break;
                    };
                    cost += fewest.tokens(at) as usize;
                    kept.push(members[at] as usize);
                    before = at;
                }
            }
            kept.sort_unstable();
            build.units = kept;
            let window = self.window_of(&build.units, |n| units.span(n), &fixed, view, cap);
            Ok((window, build))
        })
    }

    /// ShapeHistory over `units` and the kept nodes of its choice.
    fn shape_of_units(
        &self,
        units: &impl ShapeUnits,
        view: &View,
        budget: usize,
        keep_last: usize,
        min_keep: usize,
        summary_tokens: Option<usize>,
    ) -> (Result<Shape>, Result<Window>) {
        let chosen = shape_of(units, budget, keep_last, min_keep, summary_tokens);
        let window = chosen
            .as_ref()
            .map(|shape| self.window_of_units(&shape.units, units, view))
            .map_err(Clone::clone);
        (chosen, window)
    }

    /// The kept units' nodes, in the view's order (sections are the caller's:
    /// it lays the nodes out and counts them), and which are pinned units' nodes.
    fn window_of_units(&self, kept: &[usize], units: &impl ShapeUnits, view: &View) -> Window {
        let mut window = Window::default();
        for &n in kept {
            let unit = units.unit(n);
            for i in unit.start..unit.end {
                let seq = view.seq(i);
                if unit.kind == UnitKind::Pinned && self.record(seq).flags() & FLAG_PINNED != 0 {
                    window.pinned_by_header.push(seq);
                }
                window.kept.push((seq, view.part(i)));
            }
        }
        window
    }
}
