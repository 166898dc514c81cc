//! The three selection policies, on units and exact token counts.
//!
//! Each returns which units to keep (and which extras); the caller lays the
//! output out. Costs add up per message plus the reply priming: an upper
//! bound of the final count, since merging neighbours afterwards only saves
//! tokens (every merge drops a message's framing and role).

use super::analyze::{Analysis, Role, Unit, UnitKind};
use crate::chat::REPLY_PRIMING;
use crate::error::{Error, Result};
use crate::tags::{CONSTRAINT, EVIDENCE, LOG, PULSE};

/// How fast tagged messages age, per minute: a half-life of about 11.5
/// hours (untagged messages at 0.85 halve in about 4 minutes).
pub const DEFAULT_TAG_DECAY: f64 = 0.999;

/// How many of the newest turns the weighted window keeps before weights
/// compete (the turn in progress is one of them).
pub const DEFAULT_RECENT_TURNS: usize = 3;

/// Weights of the weighted window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub system: f64,
    pub constraint: f64,
    pub evidence: f64,
    pub pulse: f64,
    pub log: f64,
    /// Untagged messages weigh `decay ^ (age in minutes)`.
    pub decay: f64,
    /// Tagged messages weigh their tag's weight times `tag_decay ^ (age in
    /// minutes)`: far slower than `decay`, so rules stated long ago still
    /// outweigh chatter, but a session's old requests yield to recent work.
    pub tag_decay: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            system: 5.0,
            constraint: 3.0,
            evidence: 2.0,
            pulse: 1.5,
            log: 0.3,
            decay: 0.85,
            tag_decay: DEFAULT_TAG_DECAY,
        }
    }
}

/// The units every policy keeps (system, pinned, the turn in progress) and their cost
/// with the reply priming; an error if they alone are over `budget`.
fn mandatory(units: &[Unit], budget: usize) -> Result<(Vec<usize>, usize)> {
    let kept: Vec<usize> = (0..units.len())
        .filter(|&u| units[u].kind != UnitKind::Normal)
        .collect();
    costed(|u| &units[u], kept, budget)
}

/// The mandatory units `kept` (read through `unit`) with their cost and the
/// reply priming; an error if they alone are over `budget`.
fn costed<'u>(
    unit: impl Fn(usize) -> &'u Unit + Copy,
    kept: Vec<usize>,
    budget: usize,
) -> Result<(Vec<usize>, usize)> {
    let cost = REPLY_PRIMING + kept.iter().map(|&u| unit(u).tokens).sum::<usize>();
    if cost > budget {
        return Err(over_budget(unit, &kept, budget));
    }
    Ok((kept, cost))
}

fn over_budget<'u>(unit: impl Fn(usize) -> &'u Unit, kept: &[usize], budget: usize) -> Error {
    let size = |kind: UnitKind| -> usize {
        kept.iter()
            .map(|&u| unit(u))
            .filter(|u| u.kind == kind)
            .map(|u| u.tokens)
            .sum()
    };
    Error::OverBudget {
        system: size(UnitKind::System),
        pinned: size(UnitKind::Pinned),
        current: size(UnitKind::Current),
        budget,
    }
}

/// The weight of a message: given, else by role, else by its tag's weight
/// (aged by `tag_decay`), else by age alone (`decay`).
pub fn message_weight(
    analysis: &Analysis,
    message: usize,
    weights: &Weights,
    now: Option<f64>,
) -> f64 {
    let info = &analysis.messages[message];
    if let Some(weight) = info.weight {
        return weight;
    }
    if info.role == Role::System {
        return weights.system;
    }
    // Age in minutes: from timestamps when both sides have them, else one
    // minute a message back from the end.
    let age = match (now, info.timestamp) {
        (Some(now), Some(at)) => ((now - at) / 60.0).max(0.0),
        _ => (analysis.messages.len() - 1 - message) as f64,
    };
    match tag_weight(info.tags, weights) {
        Some(weight) => weight * decayed(weights.tag_decay.ln(), age),
        None => decayed(weights.decay.ln(), age),
    }
}

/// `decay ^ age` for `ln_decay = decay.ln()` (`decay` in [0, 1], `age` at
/// least 0), computed as `exp(age * ln_decay)`: an `exp` costs a third of a
/// `pow`, and a long log weighs every node each turn. The Python reference
/// computes it the same way (`math.exp`, `math.log`, the same C library), so
/// both give the same bits. An age of 0 weighs 1, as `0 ^ 0` does, and so
/// does any age at a decay of 1 (an infinite age too, where the product
/// would be NaN).
#[inline]
pub fn decayed(ln_decay: f64, age: f64) -> f64 {
    if age == 0.0 || ln_decay == 0.0 {
        return 1.0;
    }
    (age * ln_decay).exp()
}

/// The weight of a message's first tag, in the order constraint, evidence,
/// pulse, log; `None` if it has none.
pub fn tag_weight(tags: u8, weights: &Weights) -> Option<f64> {
    [
        (CONSTRAINT, weights.constraint),
        (EVIDENCE, weights.evidence),
        (PULSE, weights.pulse),
        (LOG, weights.log),
    ]
    .into_iter()
    .find(|&(tag, _)| tags & tag != 0)
    .map(|(_, weight)| weight)
}

/// The weighted window: mandatory units (the turn in progress among them),
/// then up to `max_anchors` constraint units (the earliest), then the units
/// of the newest `recent_turns` turns (newest first), then the rest by weight
/// (heaviest first, newer first on ties), each wherever it fits. Kept units
/// in chronological order.
pub fn weighted_window(
    analysis: &Analysis,
    budget: usize,
    weights: &Weights,
    max_anchors: usize,
    recent_turns: usize,
    now: Option<f64>,
) -> Result<Vec<usize>> {
    greedy_by_weight(&analysis.units, budget, max_anchors, recent_turns, |unit| {
        (unit.start..unit.end)
            .map(|m| message_weight(analysis, m, weights, now))
            .fold(f64::NEG_INFINITY, f64::max)
    })
}

/// The first unit of the newest `turns` turns (`units.len()` for none): the
/// start of the `turns`-th newest unit that starts a turn, or of the first
/// one if there are fewer.
pub fn recent_from(units: &[Unit], turns: usize) -> usize {
    if turns == 0 {
        return units.len();
    }
    let mut seen = 0;
    let mut from = units.len();
    for (u, unit) in units.iter().enumerate().rev() {
        if unit.turn_start {
            from = u;
            seen += 1;
            if seen == turns {
                break;
            }
        }
    }
    from
}

/// Whether a unit of the newest turns of `tokens` goes in before weights
/// compete: it fits, and the newest turns (beyond what must be kept) stay
/// within half the budget, so the rules stated long ago keep room
/// at a small budget. What does not go in here competes by weight after.
pub fn recent_fits(recent_cost: usize, tokens: usize, cost: usize, budget: usize) -> bool {
    cost + tokens <= budget && (recent_cost + tokens) <= budget / 2
}

/// [`weighted_window`] over any units, weighed by `unit_weight`.
pub fn greedy_by_weight(
    units: &[Unit],
    budget: usize,
    max_anchors: usize,
    recent_turns: usize,
    unit_weight: impl Fn(&Unit) -> f64,
) -> Result<Vec<usize>> {
    let (mut kept, mut cost) = mandatory(units, budget)?;
    // Never more anchors than units, however many were asked for.
    let mut anchors = Vec::with_capacity(max_anchors.min(units.len()));
    for (u, unit) in units.iter().enumerate() {
        if anchors.len() == max_anchors {
            break;
        }
        if unit.kind == UnitKind::Normal && unit.tags & CONSTRAINT != 0 {
            anchors.push(u);
            if cost + unit.tokens <= budget {
                cost += unit.tokens;
                kept.push(u);
            }
        }
    }
    let recent = recent_from(units, recent_turns);
    let mut recent_taken = vec![false; units.len() - recent];
    let mut recent_cost = 0;
    for u in (recent..units.len()).rev() {
        let unit = &units[u];
        if unit.kind == UnitKind::Normal
            && !anchors.contains(&u)
            && recent_fits(recent_cost, unit.tokens, cost, budget)
        {
            cost += unit.tokens;
            recent_cost += unit.tokens;
            recent_taken[u - recent] = true;
            kept.push(u);
        }
    }
    let left = budget - cost;
    let mut rest: Vec<u128> = Vec::with_capacity(units.len());
    for (u, unit) in units.iter().enumerate() {
        if unit.kind == UnitKind::Normal
            && unit.tokens <= left
            && !anchors.contains(&u)
            && !(u >= recent && recent_taken[u - recent])
        {
            rest.push(weight_key(unit_weight(unit), u, unit.tokens));
        }
    }
    fill_by_weight(&mut rest, budget, &mut cost, &mut kept);
    kept.sort_unstable();
    Ok(kept)
}

/// The order of the weighted window as one integer per unit: heaviest first,
/// newer first on ties (the weight's order-preserving bits, then the unit
/// number), with the unit's tokens in the low bits so filtering by size reads
/// the key alone. Sort keys descending.
pub fn weight_key(weight: f64, unit: usize, tokens: usize) -> u128 {
    // -0.0 (a negative weight decayed to nothing) weighs what 0.0 does, as
    // the comparison of the floats themselves has it.
    let bits = (weight + 0.0).to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
    (u128::from(ordered) << 64) | ((unit as u128) << 32) | u128::from(tokens)
}

/// Take units in [`weight_key`] order wherever they fit, into `kept`.
///
/// The order is found a slice at a time (a partial selection, then a sort of
/// that slice), and units larger than the budget left are dropped between
/// slices, so a long history costs a few linear passes, not a full sort. No
/// more than `left / smallest` units can go in, so the first slice is that
/// large: in the usual case, one selection and one sort of what is taken.
pub fn fill_by_weight(
    rest: &mut Vec<u128>,
    budget: usize,
    cost: &mut usize,
    kept: &mut Vec<usize>,
) {
    const FIRST_SLICE: usize = 256;
    let unit_of = |key: u128| (key >> 32) as u32 as usize;
    let tokens_of = |key: u128| key as u32 as usize;
    let mut take_in_order = |keys: &[u128], cost: &mut usize| {
        for &key in keys {
            if *cost + tokens_of(key) <= budget {
                *cost += tokens_of(key);
                kept.push(unit_of(key));
            }
        }
    };
    let left = budget.saturating_sub(*cost);
    let mut smallest = usize::MAX;
    rest.retain(|&key| {
        let tokens = tokens_of(key);
        if tokens <= left {
            smallest = smallest.min(tokens);
        }
        tokens <= left
    });
    let mut slice = FIRST_SLICE.max((left / smallest.max(1)).saturating_add(1));
    while !rest.is_empty() {
        let take = slice.min(rest.len());
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, |a, b| b.cmp(a));
        }
        rest[..take].sort_unstable_by(|a, b| b.cmp(a));
        take_in_order(&rest[..take], cost);
        // Only units that can still fit matter (the budget left only shrinks):
        // the rest moves to the front, what is too large is dropped.
        let left = budget - *cost;
        let mut write = 0;
        for read in take..rest.len() {
            if tokens_of(rest[read]) <= left {
                rest[write] = rest[read];
                write += 1;
            }
        }
        rest.truncate(write);
        slice = slice.saturating_mul(2);
    }
}

/// What ShapeHistory kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub units: Vec<usize>,
    /// Turns kept at the end; `None` when everything fit.
    pub turns: Option<usize>,
    /// Whether the summary goes in.
    pub summary: bool,
}

/// ShapeHistory: everything if it fits; else system + first user message +
/// summary + the last `n` turns, `n` from `keep_last` down to `min_keep`;
/// then without the summary, down to the last turn alone.
pub fn shape(
    analysis: &Analysis,
    budget: usize,
    keep_last: usize,
    min_keep: usize,
    summary_tokens: Option<usize>,
) -> Result<Shape> {
    shape_units(&analysis.units, budget, keep_last, min_keep, summary_tokens)
}

/// The units ShapeHistory chooses from, as it reads them: by number, with
/// their tokens' sum, the ones every policy keeps and where turns start.
/// A caller that keeps these between turns (a log's final units) answers
/// without walking every unit; [`Walked`] walks a list once.
pub trait ShapeUnits {
    fn count(&self) -> usize;
    fn unit(&self, n: usize) -> &Unit;
    /// Every unit's tokens, summed.
    fn tokens(&self) -> usize;
    /// The units every policy keeps (system, pinned, the turn in progress), in order.
    fn mandatory(&self) -> Vec<usize>;
    /// How many units start a turn.
    fn turns(&self) -> usize;
    /// The `k`-th unit that starts a turn.
    fn turn_start(&self, k: usize) -> usize;
}

/// [`ShapeUnits`] of a list of units, from one walk over it.
pub struct Walked<'a> {
    units: &'a [Unit],
    tokens: usize,
    mandatory: Vec<usize>,
    turn_starts: Vec<usize>,
}

impl<'a> Walked<'a> {
    pub fn new(units: &'a [Unit]) -> Self {
        Self {
            units,
            tokens: units.iter().map(|u| u.tokens).sum(),
            mandatory: (0..units.len())
                .filter(|&u| units[u].kind != UnitKind::Normal)
                .collect(),
            turn_starts: (0..units.len()).filter(|&u| units[u].turn_start).collect(),
        }
    }
}

impl ShapeUnits for Walked<'_> {
    fn count(&self) -> usize {
        self.units.len()
    }
    fn unit(&self, n: usize) -> &Unit {
        &self.units[n]
    }
    fn tokens(&self) -> usize {
        self.tokens
    }
    fn mandatory(&self) -> Vec<usize> {
        self.mandatory.clone()
    }
    fn turns(&self) -> usize {
        self.turn_starts.len()
    }
    fn turn_start(&self, k: usize) -> usize {
        self.turn_starts[k]
    }
}

/// [`shape`] over any units (a log's, grouped from its headers).
pub fn shape_units(
    units: &[Unit],
    budget: usize,
    keep_last: usize,
    min_keep: usize,
    summary_tokens: Option<usize>,
) -> Result<Shape> {
    shape_of(
        &Walked::new(units),
        budget,
        keep_last,
        min_keep,
        summary_tokens,
    )
}

/// [`shape`] over units as [`ShapeUnits`] reads them: what it costs beyond
/// their sums is the turns it tries, never a walk over every unit (but
/// where everything fits, and every unit is listed).
pub fn shape_of(
    units: &impl ShapeUnits,
    budget: usize,
    keep_last: usize,
    min_keep: usize,
    summary_tokens: Option<usize>,
) -> Result<Shape> {
    let count = units.count();
    let all: usize = REPLY_PRIMING + units.tokens();
    if all <= budget {
        return Ok(Shape {
            units: (0..count).collect(),
            turns: None,
            summary: false,
        });
    }
    let unit = |u: usize| units.unit(u);
    let (mandatory, _) = costed(unit, units.mandatory(), budget)?;
    let turns = units.turns();
    let first_user = (turns > 0).then(|| units.turn_start(0));
    let candidate = |n: usize, with_summary: bool| -> Option<Shape> {
        // The first unit of the newest n turns (n past them: all of them).
        let from = if n == 0 || turns == 0 {
            count
        } else {
            units.turn_start(turns.saturating_sub(n))
        };
        let mut kept: Vec<usize> = mandatory.clone();
        kept.extend(first_user);
        kept.extend(from..count);
        kept.sort_unstable();
        kept.dedup();
        let dropped_any = kept.len() < count;
        let summary = with_summary && dropped_any && summary_tokens.is_some();
        let cost = REPLY_PRIMING
            + kept.iter().map(|&u| units.unit(u).tokens).sum::<usize>()
            + if summary {
                summary_tokens.unwrap_or(0)
            } else {
                0
            };
        (cost <= budget).then_some(Shape {
            units: kept,
            turns: Some(n),
            summary,
        })
    };
    // Every n past the number of turns keeps what n = turns keeps: it is
    // tried once, for the first such n, so a huge keep_last costs nothing.
    let search = |low: usize, high: usize, with_summary: bool| -> Option<Shape> {
        if low > high {
            return None;
        }
        if high > turns {
            if let Some(mut shape) = candidate(turns.max(low), with_summary) {
                shape.turns = Some(high);
                return Some(shape);
            }
            return (low..turns).rev().find_map(|n| candidate(n, with_summary));
        }
        (low..=high).rev().find_map(|n| candidate(n, with_summary))
    };
    let min_keep = min_keep.min(keep_last);
    search(min_keep, keep_last, true)
        .or_else(|| search(0, min_keep, false))
        .ok_or_else(|| {
            // The first user message is kept as pinned ones are: named with them.
            let mut error = over_budget(unit, &mandatory, budget);
            if let (Error::OverBudget { pinned, .. }, Some(first)) = (&mut error, first_user)
                && !mandatory.contains(&first)
            {
                *pinned += units.unit(first).tokens;
            }
            error
        })
}

/// Extras of the priority builder, by their exact token costs.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    pub global: Option<usize>,
    pub memories: Vec<usize>,
    /// Chronological; filled newest first.
    pub segments: Vec<usize>,
    pub anchoring: Option<usize>,
}

/// What the priority builder kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Build {
    pub units: Vec<usize>,
    pub global: bool,
    pub anchoring: bool,
    /// Indices into the memories and segments given, in their order.
    pub memories: Vec<usize>,
    pub segments: Vec<usize>,
}

/// The priority builder: mandatory units; anchoring; the global summary;
/// memories while the total stays within 80% of the budget; segment
/// summaries, newest first, within 90%; recent units (higher `priority`
/// first, then constraints, then newest) within 100%.
pub fn build(analysis: &Analysis, budget: usize, extras: &Extras) -> Result<Build> {
    let (mut units, mut cost) = mandatory(&analysis.units, budget)?;
    let mut out = build_extras(budget, extras, &mut cost);
    // Given priority first, then the user's rules, then the newest; the keys
    // are computed once, not per comparison.
    let mut recent: Vec<(f64, bool, usize)> = (0..analysis.units.len())
        .filter(|&u| analysis.units[u].kind == UnitKind::Normal)
        .map(|u| {
            let unit = &analysis.units[u];
            let priority = (unit.start..unit.end)
                .map(|m| analysis.messages[m].priority)
                .fold(f64::NEG_INFINITY, f64::max);
            (priority, unit.tags & CONSTRAINT != 0, u)
        })
        .collect();
    recent.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    for (_, _, u) in recent {
        let tokens = analysis.units[u].tokens;
        if cost.saturating_add(tokens) <= budget {
            cost += tokens;
            units.push(u);
        }
    }
    units.sort_unstable();
    out.units = units;
    Ok(out)
}

/// The extras the priority builder takes, in its order, after the
/// mandatory units cost `cost`: anchoring; the global summary; memories
/// within 80% of the budget; segment summaries, newest first, within 90%.
/// `cost` grows by what was taken; `units` of the answer is left empty.
pub fn build_extras(budget: usize, extras: &Extras, cost: &mut usize) -> Build {
    let fits = |tokens: usize, limit: usize, cost: &mut usize| -> bool {
        let ok = cost.saturating_add(tokens) <= limit;
        if ok {
            *cost += tokens;
        }
        ok
    };
    // In 128 bits: a budget near the top of usize must not wrap.
    let share = |percent: u128| (budget as u128 * percent / 100) as usize;
    let mut out = Build::default();
    if let Some(tokens) = extras.anchoring {
        out.anchoring = fits(tokens, budget, cost);
    }
    if let Some(tokens) = extras.global {
        out.global = fits(tokens, budget, cost);
    }
    for (i, &tokens) in extras.memories.iter().enumerate() {
        if fits(tokens, share(80), cost) {
            out.memories.push(i);
        }
    }
    for (i, &tokens) in extras.segments.iter().enumerate().rev() {
        if fits(tokens, share(90), cost) {
            out.segments.push(i);
        }
    }
    out.segments.sort_unstable();
    out
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point
mod tests {
    use super::{decayed, weight_key};

    #[test]
    fn decay_edges_weigh_as_powers_do() {
        for age in [0.0, 1e-300, 0.5, 3.0, 1e9, f64::INFINITY] {
            assert_eq!(decayed(1.0f64.ln(), age), 1.0, "1^{age}");
            assert_eq!(
                decayed(0.0f64.ln(), age),
                if age == 0.0 { 1.0 } else { 0.0 },
                "0^{age}"
            );
            assert!(decayed(0.85f64.ln(), age) <= 1.0);
        }
        assert_eq!(decayed(0.5f64.ln(), f64::INFINITY), 0.0);
        assert_eq!(decayed(0.5f64.ln(), 2.0), (2.0 * 0.5f64.ln()).exp());
    }

    #[test]
    fn a_negative_zero_weight_orders_as_zero() {
        assert_eq!(weight_key(-0.0, 3, 7), weight_key(0.0, 3, 7));
        assert!(weight_key(-1e-300, 3, 7) < weight_key(0.0, 3, 7));
        assert!(weight_key(0.0, 3, 7) < weight_key(1e-300, 3, 7));
    }
}
