//! Selection on a log, from the mapped headers alone: the context view's
//! nodes, grouped into units and weighed as the weighted window does; only
//! the kept nodes' payloads are ever read (by the caller).

use super::format::{
    FILE_HEADER_LEN, FLAG_CALLS, FLAG_HAS_TEXT, FLAG_PINNED, FLAG_RESULTS, RECORD_LEN,
};
use super::{KIND_BRANCH, KIND_MESSAGE, KIND_SUMMARY, MessageLog, NONE};
use crate::chat::REPLY_PRIMING;
use crate::error::{Error, Result};
use crate::select::{
    Role, Unit, UnitFacts, UnitKind, Weights, decayed, fill_by_weight, for_each_unit, recent_fits,
    tag_weight, weight_key,
};
use crate::tags::CONSTRAINT;

/// Records ahead of the sweep whose headers are fetched early.
const PREFETCH_AHEAD: usize = 16;

/// The most holes a chain keeps over a log's life (see
/// `MessageLog::extend_linear`): about 2,000 failed turns. A lookup of a
/// seq searches them, and each selection copies their places (32 KB at
/// most); a log rewound more is walked.
const MOST_HOLES: usize = 4096;

/// Segment (level-2) summaries the context view keeps: the newest.
pub const SEGMENTS_KEPT: usize = 3;

/// The context view, listed, or the nodes of a plain log: one chain with
/// no summary on it (`All`).
pub(super) enum View {
    /// The chain's `len` nodes, in seq order: every seq but those the
    /// chain leaves out (branch markers, nodes a rewind left behind). Each
    /// left-out seq is given by how many chain nodes come before it
    /// (ascending), so the `i`-th node is seq `i` plus those at or before `i`.
    All(usize, Vec<usize>),
    Listed(Vec<u64>, Vec<ViewPart>),
}

impl From<View> for ViewSeqs {
    fn from(view: View) -> Self {
        match view {
            View::All(n, gaps) if gaps.is_empty() => ViewSeqs::All(n),
            View::All(n, gaps) => ViewSeqs::AllBut(
                n + gaps.len(),
                gaps.iter()
                    .enumerate()
                    .map(|(k, &g)| (g + k) as u64)
                    .collect(),
            ),
            View::Listed(seqs, _) => ViewSeqs::Listed(seqs),
        }
    }
}

impl View {
    pub(super) fn len(&self) -> usize {
        match self {
            View::All(n, _) => *n,
            View::Listed(seqs, _) => seqs.len(),
        }
    }
    pub(super) fn seq(&self, i: usize) -> u64 {
        match self {
            View::All(_, gaps) => (i + gaps.partition_point(|&g| g <= i)) as u64,
            View::Listed(seqs, _) => seqs[i],
        }
    }
    pub(super) fn part(&self, i: usize) -> ViewPart {
        match self {
            View::All(..) => ViewPart::Raw,
            View::Listed(_, parts) => parts[i],
        }
    }
    /// Whether this is a plain log's view (see [`View::All`]).
    pub(super) fn is_plain(&self) -> bool {
        matches!(self, View::All(..))
    }
}

/// A node of the context view and why it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewPart {
    /// A system or pinned message the summaries cover: kept.
    Anchor,
    /// The newest level-3 summary.
    Global,
    /// One of the newest level-2 summaries after it.
    Segment,
    /// A message after the summaries' pointer.
    Raw,
}

/// What the weighted window kept of a log, and the tokens per section.
/// The seqs of the context view a window chose from: what was not kept is
/// the rest of it (so a caller can list it later, as it was then).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViewSeqs {
    /// Every node `0..n` (a plain log).
    All(usize),
    /// Every node `0..n` but these seqs (ascending): a plain log rewound.
    AllBut(usize, Vec<u64>),
    Listed(Vec<u64>),
}

impl Default for ViewSeqs {
    fn default() -> Self {
        ViewSeqs::All(0)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Kept nodes, in the context view's order.
    pub kept: Vec<(u64, ViewPart)>,
    /// The view they were chosen from.
    pub view: ViewSeqs,
    /// The kept nodes pinned by their headers alone (at append, not by the
    /// message's own `pinned`), for a caller that lays out their payloads.
    pub pinned_by_header: Vec<u64>,
    pub pinned: usize,
    pub global: usize,
    pub segments: usize,
    pub recent: usize,
    pub input: usize,
}

/// The fields of one mapped record selection reads.
#[derive(Clone, Copy)]
pub(super) struct Record<'a>(&'a [u8]);

impl Record<'_> {
    pub(super) fn parent(&self) -> u64 {
        u64::from_le_bytes(self.0[8..16].try_into().expect("8 bytes"))
    }
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
    pub(super) fn timestamp(&self) -> f64 {
        f64::from_le_bytes(self.0[16..24].try_into().expect("8 bytes"))
    }
    pub(super) fn tokens(&self) -> usize {
        self.u32_at(40) as usize
    }
    /// The `priority` stored at append (finite; 0 if none was given).
    pub(super) fn priority(&self) -> f64 {
        f64::from(f32::from_bits(self.u32_at(48)))
    }
    pub(super) fn weight(&self) -> Option<f64> {
        let weight = f32::from_bits(self.u32_at(44));
        (!weight.is_nan()).then_some(f64::from(weight))
    }
    pub(super) fn role(&self) -> Role {
        super::format::role_of_byte(self.0[56])
    }
    pub(super) fn kind(&self) -> u8 {
        self.0[57]
    }
    pub(super) fn tags(&self) -> u8 {
        self.0[58]
    }
    pub(super) fn flags(&self) -> u8 {
        self.0[59]
    }
    fn level(&self) -> u8 {
        self.0[59] >> 6
    }
    pub(super) fn facts(&self) -> UnitFacts {
        let flags = self.flags();
        UnitFacts {
            weight: f64::NAN,
            role: self.role(),
            tokens: self.tokens(),
            tags: self.tags(),
            pinned: flags & FLAG_PINNED != 0,
            calls: flags & FLAG_CALLS != 0,
            results: flags & FLAG_RESULTS != 0,
            has_text: flags & FLAG_HAS_TEXT != 0,
        }
    }
}

impl MessageLog {
    pub(super) fn record(&self, seq: u64) -> Record<'_> {
        let at = FILE_HEADER_LEN + seq as usize * RECORD_LEN;
        Record(&self.map.bytes()[at..at + RECORD_LEN])
    }

    /// The nodes the model should see of the active path: system and pinned
    /// messages the summaries cover, the newest global summary, the newest
    /// segment summaries after it, then the messages after the pointer.
    pub fn view(&mut self) -> Result<Vec<(u64, ViewPart)>> {
        let view = self.compact_view()?;
        Ok((0..view.len())
            .map(|i| (view.seq(i), view.part(i)))
            .collect())
    }

    /// The view without materialising it where it is simply the chain's
    /// nodes: a log whose records form one chain (rewinds of its newest
    /// nodes included), with no summary on its path.
    pub(super) fn compact_view(&mut self) -> Result<View> {
        self.refresh()?;
        self.ensure_checked()?;
        self.extend_linear();
        let linear = self.position.head != NONE
            && self.position.head == self.chain_tail
            && self.linear_len == self.count;
        if linear && self.position.summary == NONE {
            return Ok(View::All(
                self.count as usize - self.chain_holes.len(),
                self.chain_gaps(),
            ));
        }
        let path = if linear {
            let holes = &self.chain_holes;
            (0..self.count)
                .filter(|seq| holes.binary_search(seq).is_err())
                .collect()
        } else {
            self.path_to(None)?
        };
        let pointer = self.position.summary_last;
        let after = |seq: u64| pointer == NONE || seq > pointer;
        let summaries: Vec<usize> = (0..path.len())
            .filter(|&i| self.record(path[i]).kind() == KIND_SUMMARY)
            .collect();
        let global = summaries
            .iter()
            .rev()
            .copied()
            .find(|&i| self.record(path[i]).level() == 3);
        let segments: Vec<usize> = summaries
            .iter()
            .copied()
            .filter(|&i| self.record(path[i]).level() == 2 && global.is_none_or(|g| i > g))
            .collect();
        let segments = &segments[segments.len().saturating_sub(SEGMENTS_KEPT)..];
        let (mut seqs, mut parts) = (Vec::new(), Vec::new());
        for &seq in &path {
            let record = self.record(seq);
            let anchor = record.role() == Role::System || record.flags() & FLAG_PINNED != 0;
            if record.kind() == KIND_MESSAGE && !after(seq) && anchor {
                seqs.push(seq);
                parts.push(ViewPart::Anchor);
            }
        }
        for (i, part) in global
            .iter()
            .map(|&i| (i, ViewPart::Global))
            .chain(segments.iter().map(|&i| (i, ViewPart::Segment)))
        {
            seqs.push(path[i]);
            parts.push(part);
        }
        for &seq in &path {
            if self.record(seq).kind() == KIND_MESSAGE && after(seq) {
                seqs.push(seq);
                parts.push(ViewPart::Raw);
            }
        }
        Ok(View::Listed(seqs, parts))
    }

    /// Extend the count of leading records that form one chain of messages
    /// and summaries (each the child of the one before), so the path of a
    /// log that was never rewound is every node, with no walk. A branch
    /// marker back to a node of the chain (a rewind) keeps it one chain:
    /// the nodes it leaves behind, and the marker, are holes in it, while
    /// they stay few enough ([`MOST_HOLES`]); a turn that failed after logging its
    /// input leaves two. Past that, or at any other fork, the path is walked.
    fn extend_linear(&mut self) {
        if self.linear_len > self.count {
            // Fewer records than were read (not seen in a log that only
            // grows): start again.
            (self.linear_len, self.chain_tail) = (0, NONE);
            self.chain_holes.clear();
        }
        while self.linear_len < self.count {
            let seq = self.linear_len;
            let record = self.record(seq);
            let parent = record.parent();
            let kind = record.kind();
            let joins = if matches!(kind, KIND_MESSAGE | KIND_SUMMARY) {
                parent == self.chain_tail
            } else {
                kind == KIND_BRANCH && self.rewound_along_chain(seq, parent)
            };
            if !joins {
                break;
            }
            if kind != KIND_BRANCH {
                self.chain_tail = seq;
            }
            self.linear_len += 1;
        }
    }

    /// The chain's holes as [`View::All`] gives them: for each, how many
    /// of the chain's nodes come before it.
    fn chain_gaps(&self) -> Vec<usize> {
        let holes = &self.chain_holes;
        holes
            .iter()
            .enumerate()
            .map(|(k, &h)| h as usize - k)
            .collect()
    }

    /// Takes branch marker `seq` back to `parent` into the chain, if
    /// `parent` is on it: the chain's nodes after `parent` become holes, and
    /// so does the marker. `false` (nothing changed) where `parent` is off
    /// the chain or the holes would be too many.
    fn rewound_along_chain(&mut self, seq: u64, parent: u64) -> bool {
        let holes = &self.chain_holes;
        let on_chain = |node: u64| node == NONE || holes.binary_search(&node).is_err();
        if (parent != NONE && parent >= seq) || !on_chain(parent) {
            return false;
        }
        let after = if parent == NONE { 0 } else { parent + 1 };
        let holes_after = holes.len() - holes.partition_point(|&h| h < after);
        let left = (seq - after) as usize - holes_after;
        if holes.len() + left + 1 > MOST_HOLES {
            return false;
        }
        let mut merged: Vec<u64> = Vec::with_capacity(holes.len() + left + 1);
        merged.extend(holes.iter().copied().filter(|&h| h < after));
        merged.extend(after..=seq); // the old holes after `parent` among them
        self.chain_holes = merged;
        self.chain_tail = parent; // a rewind's head: the node it went back to
        true
    }

    /// The facts of the view's `i`-th node for grouping into units, read
    /// from its header (tool results counted as cut to `cap`, where their
    /// capped counts are known), weighed by `weigh`. Headers a little ahead
    /// are fetched early: a sweep reads every one.
    pub(super) fn facts_of<'s>(
        &'s self,
        view: &'s View,
        cap: Option<usize>,
        weigh: impl Fn(Record<'_>, usize) -> f64 + 's,
    ) -> impl Fn(usize) -> UnitFacts + 's {
        let records = &self.map.bytes()[FILE_HEADER_LEN..];
        let map = &self.map;
        let all = matches!(view, View::All(_, gaps) if gaps.is_empty());
        // A plain log never rewound: its view is every node, no lookup.
        let seq_of = move |i: usize| if all { i } else { view.seq(i) as usize };
        move |i: usize| {
            if i + PREFETCH_AHEAD < view.len() {
                map.prefetch(FILE_HEADER_LEN + seq_of(i + PREFETCH_AHEAD) * RECORD_LEN);
            }
            let seq = seq_of(i);
            let record = Record(&records[seq * RECORD_LEN..seq * RECORD_LEN + RECORD_LEN]);
            UnitFacts {
                weight: weigh(record, i),
                tokens: self.tokens_under_cap(record, seq as u64, cap),
                ..record.facts()
            }
        }
    }

    /// The weighted window over the context view, under `budget` tokens, as
    /// [`crate::select::weighted_window`] chooses. Ages come from the nodes'
    /// timestamps when `now` is given, else one minute a node back from the
    /// end (as for messages). `None` where a result over `cap` has no capped
    /// count yet: the caller counts it (`over_cap`) and asks again.
    pub fn weighted_window(
        &mut self,
        budget: usize,
        weights: &Weights,
        max_anchors: usize,
        recent_turns: usize,
        now: Option<f64>,
        cap: Option<usize>,
    ) -> Result<Option<Window>> {
        let view = self.compact_view()?;
        if self.uncounted(cap) {
            return Ok(None);
        }
        if now.is_none() {
            self.decay_powers.prepare(weights.decay, view.len());
            self.tag_decay_powers.prepare(weights.tag_decay, view.len());
        }
        if let Some(window) = self.weighted_from_kept_units(
            &view,
            budget,
            weights,
            max_anchors,
            recent_turns,
            now,
            cap,
        ) {
            return Ok(Some(Window {
                view: view.into(),
                ..window?
            }));
        }
        let mut keys = std::mem::take(&mut self.scratch_keys);
        let mut starts = std::mem::take(&mut self.scratch_starts);
        let weigher = Weigher::new(
            weights,
            now,
            view.len(),
            &self.decay_powers.powers,
            &self.tag_decay_powers.powers,
        );
        let weigh = |record: Record<'_>, i: usize| weigher.of_record(record, i);
        // One sweep over the headers, grouped and weighed together; only the
        // units' order keys and starts are kept (16 + 4 bytes each).
        // With ages from timestamps each node's weight is a pow call, most
        // of a long view's sweep: its facts are read on every core first
        // (the same calls, so the same weights), then grouped in order.
        let mut read_ahead = std::mem::take(&mut self.scratch_facts);
        let read = self.facts_of(&view, cap, weigh);
        let ahead = now.is_some() && view.len() >= PARALLEL_FACTS_FROM;
        if ahead {
            fill_in_parallel(&mut read_ahead, view.len(), &read);
        }
        let read_ahead_ref = &read_ahead;
        let facts = move |i: usize| {
            if ahead { read_ahead_ref[i] } else { read(i) }
        };
        keys.clear();
        starts.clear();
        let mut fixed: Vec<(usize, Unit)> = Vec::new();
        let mut anchors: Vec<(usize, Unit)> = Vec::new();
        // The newest `recent_turns` turn starts, by unit number.
        let mut turn_starts = std::collections::VecDeque::with_capacity(recent_turns.min(64) + 1);
        let mut number = 0;
        for_each_unit(view.len(), facts, |unit| {
            starts.push(u32::try_from(unit.start).expect("a view of under 2^32 nodes"));
            if unit.turn_start && recent_turns > 0 {
                if turn_starts.len() == recent_turns {
                    turn_starts.pop_front();
                }
                turn_starts.push_back(number);
            }
            match unit.kind {
                UnitKind::Normal if unit.tags & CONSTRAINT != 0 && anchors.len() < max_anchors => {
                    anchors.push((number, unit));
                }
                UnitKind::Normal => keys.push(weight_key(unit.weight, number, unit.tokens)),
                _ => fixed.push((number, unit)),
            }
            number += 1;
        });
        let recent = turn_starts.front().copied().unwrap_or(number);
        let kept = choose(&fixed, &anchors, recent, &mut keys, budget);
        let window = kept
            .as_ref()
            .map(|kept| self.window_of(kept, spans(&starts, view.len()), &fixed, &view, cap));
        self.scratch_keys = keys;
        self.scratch_starts = starts;
        self.scratch_facts = read_ahead;
        Ok(Some(Window {
            view: view.into(),
            ..window.map_err(Clone::clone)?
        }))
    }

    /// The kept units' nodes, in the view's order, and their tokens by
    /// section; `span(n)` is unit `n`'s nodes, `fixed` (the mandatory units)
    /// in unit order.
    pub(super) fn window_of(
        &self,
        kept: &[usize],
        span: impl Fn(usize) -> (usize, usize),
        fixed: &[(usize, Unit)],
        view: &View,
        cap: Option<usize>,
    ) -> Window {
        let mut window = Window::default();
        for &n in kept {
            let (start, end) = span(n);
            // `fixed` is in unit order: a search, not a walk per kept unit
            // (a log with thousands of pinned messages keeps them all).
            let kind = fixed
                .binary_search_by_key(&n, |(f, _)| *f)
                .map_or(UnitKind::Normal, |at| fixed[at].1.kind);
            let tokens: usize = (start..end)
                .map(|i| {
                    let seq = view.seq(i);
                    self.tokens_under_cap(self.record(seq), seq, cap)
                })
                .sum();
            let section = match (kind, view.part(start)) {
                (_, ViewPart::Global) => &mut window.global,
                (_, ViewPart::Segment) => &mut window.segments,
                (UnitKind::System | UnitKind::Pinned, _) => &mut window.pinned,
                (UnitKind::Current, _) => &mut window.input,
                (UnitKind::Normal, _) => &mut window.recent,
            };
            *section += tokens;
            for i in start..end {
                let seq = view.seq(i);
                if kind == UnitKind::Pinned && self.record(seq).flags() & FLAG_PINNED != 0 {
                    window.pinned_by_header.push(seq);
                }
                window.kept.push((seq, view.part(i)));
            }
        }
        window
    }
}

/// A node's weight in the weighted window, from its header: given at
/// append, else the system weight, else its tag's weight or 1, decayed by
/// its age (in minutes from its timestamp to `now`, else one minute a node
/// back from the end of the view). Both ways of choosing on a log weigh
/// through this one place, so they give the same bits.
pub(super) struct Weigher<'a> {
    weights: &'a Weights,
    now: Option<f64>,
    last: usize,
    powers: &'a [f64],
    tag_powers: &'a [f64],
    zero_from: f64,
    tag_zero_from: f64,
    ln_decay: f64,
    ln_tag_decay: f64,
}

impl<'a> Weigher<'a> {
    /// For a view of `len` nodes; the powers are the whole-minute tables
    /// (used when `now` is `None`), prepared for at least `len` ages.
    pub(super) fn new(
        weights: &'a Weights,
        now: Option<f64>,
        len: usize,
        powers: &'a [f64],
        tag_powers: &'a [f64],
    ) -> Self {
        Self {
            weights,
            now,
            last: len.saturating_sub(1),
            powers,
            tag_powers,
            zero_from: first_zero_age(weights.decay),
            tag_zero_from: first_zero_age(weights.tag_decay),
            ln_decay: weights.decay.ln(),
            ln_tag_decay: weights.tag_decay.ln(),
        }
    }

    /// The weight of the view's `i`-th node, `record`.
    pub(super) fn of_record(&self, record: Record<'_>, i: usize) -> f64 {
        if let Some(weight) = record.weight() {
            return weight;
        }
        if record.role() == Role::System {
            return self.weights.system;
        }
        self.decaying(
            tag_weight(record.tags(), self.weights),
            record.timestamp(),
            i,
        )
    }

    /// The weight of a node with no weight of its own and no system role:
    /// `tagged` (its tag's weight, if any) decayed by its age, from
    /// `timestamp` or from its place `i` in the view.
    pub(super) fn decaying(&self, tagged: Option<f64>, timestamp: f64, i: usize) -> f64 {
        let Some(now) = self.now else {
            // Whole minutes back from the end: the same pow, from a table.
            return match tagged {
                Some(weight) => weight * self.tag_powers.get(self.last - i).copied().unwrap_or(0.0),
                None => self.powers.get(self.last - i).copied().unwrap_or(0.0),
            };
        };
        let age = ((now - timestamp) / 60.0).max(0.0);
        // Past the underflow age the power is 0.0: no exp call there
        // (an infinite zero age, at a decay of 0 or 1, is never reached).
        match tagged {
            Some(weight) if self.tag_zero_from.is_finite() && age >= self.tag_zero_from => {
                weight * 0.0
            }
            Some(weight) => weight * decayed(self.ln_tag_decay, age),
            None if self.zero_from.is_finite() && age >= self.zero_from => 0.0,
            None => decayed(self.ln_decay, age),
        }
    }
}

/// Unit `n`'s nodes from the units' first nodes alone (the last runs to
/// the end of a view of `len` nodes).
pub(super) fn spans(starts: &[u32], len: usize) -> impl Fn(usize) -> (usize, usize) + '_ {
    move |n| {
        let end = starts.get(n + 1).map_or(len, |&s| s as usize);
        (starts[n] as usize, end)
    }
}

/// Views of at least this many nodes have their facts read on every core
/// when each weight costs a pow call (a thread costs ~20 µs to start; a
/// pow, ~15 ns).
pub const PARALLEL_FACTS_FROM: usize = 1 << 16;

/// `out[i] = facts(i)` for `i` in `0..count`, on every core.
fn fill_in_parallel(
    out: &mut Vec<UnitFacts>,
    count: usize,
    facts: &(impl Fn(usize) -> UnitFacts + Sync),
) {
    // Every slot is written below: only slots the buffer never had are made.
    out.resize(count, UnitFacts::EMPTY);
    crate::parallel::fill_each(out, 1 << 14, crate::parallel::thread_count(), facts);
}

/// What the units every policy keeps cost with the reply priming; an
/// error naming their sizes if they alone are over `budget`.
pub(super) fn mandatory_cost(fixed: &[(usize, Unit)], budget: usize) -> Result<usize> {
    let size = |kind: UnitKind| -> usize {
        fixed
            .iter()
            .filter(|(_, u)| u.kind == kind)
            .map(|(_, u)| u.tokens)
            .sum()
    };
    let cost = REPLY_PRIMING + fixed.iter().map(|(_, u)| u.tokens).sum::<usize>();
    if cost > budget {
        return Err(Error::OverBudget {
            system: size(UnitKind::System),
            pinned: size(UnitKind::Pinned),
            current: size(UnitKind::Current),
            budget,
        });
    }
    Ok(cost)
}

/// As the weighted window chooses: what must stay (`fixed`, by unit number),
/// the first constraint units (`anchors`) where they fit, the units from
/// `recent` on (newest first), then the rest by weight, each wherever it
/// fits. `keys` holds the other units' [`weight_key`]s in unit order. The
/// kept unit numbers, in order.
fn choose(
    fixed: &[(usize, Unit)],
    anchors: &[(usize, Unit)],
    recent: usize,
    keys: &mut Vec<u128>,
    budget: usize,
) -> Result<Vec<usize>> {
    let mut cost = mandatory_cost(fixed, budget)?;
    let mut kept: Vec<usize> = fixed.iter().map(|(n, _)| *n).collect();
    for (n, unit) in anchors {
        if cost + unit.tokens <= budget {
            cost += unit.tokens;
            kept.push(*n);
        }
    }
    let unit_of = |key: u128| (key >> 32) as u32 as usize;
    let split = keys.partition_point(|&key| unit_of(key) < recent);
    let mut recent_cost = 0;
    let mut read = keys.len();
    let mut write = keys.len();
    // Newest first; what goes in leaves the keys, the rest competes by weight.
    while read > split {
        read -= 1;
        let key = keys[read];
        // A unit's tokens are held in 32 bits, saturated: too large to fit then.
        let tokens = key as u32 as usize;
        if recent_fits(recent_cost, tokens, cost, budget) {
            cost += tokens;
            recent_cost += tokens;
            kept.push(unit_of(key));
        } else {
            write -= 1;
            keys[write] = key;
        }
    }
    keys.drain(split..write);
    fill_by_weight(keys, budget, &mut cost, &mut kept);
    kept.sort_unstable();
    Ok(kept)
}

/// [`decayed`] for whole ages `k`, up to where it is 0.0, kept between
/// turns (a turn weighs every node; an `exp` call costs ~5 ns).
#[derive(Default)]
pub(super) struct DecayPowers {
    decay_bits: u64,
    pub(super) powers: Vec<f64>,
}

impl DecayPowers {
    fn prepare(&mut self, decay: f64, ages: usize) {
        if self.decay_bits != decay.to_bits() || self.powers.is_empty() {
            self.decay_bits = decay.to_bits();
            self.powers.clear();
            self.powers.push(1.0); // decay^0
        }
        let (ln_decay, zero_from) = (decay.ln(), first_zero_age(decay));
        while self.powers.len() < ages && (self.powers.len() as f64) < zero_from {
            self.powers
                .push(decayed(ln_decay, self.powers.len() as f64));
        }
    }
}

/// An age at and past which [`decayed`] is 0.0 (infinity if none is
/// found): near where the result falls below the smallest subnormal, 2^-1074,
/// checked; it is monotonic in the age for 0 < decay < 1.
fn first_zero_age(decay: f64) -> f64 {
    if !(decay > 0.0 && decay < 1.0) {
        return f64::INFINITY;
    }
    let ln_decay = decay.ln();
    let mut age = (-1075.0 * std::f64::consts::LN_2 / ln_decay).ceil();
    for _ in 0..64 {
        if decayed(ln_decay, age) == 0.0 {
            return age;
        }
        age += 1.0;
    }
    f64::INFINITY
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exactly zero is the point
mod tests {
    use super::{decayed, first_zero_age};

    #[test]
    fn the_zero_age_is_where_the_decay_first_underflows() {
        for decay in [0.5, 0.85, 0.99, 0.999_9] {
            let age = first_zero_age(decay);
            assert!(age.is_finite(), "{decay}");
            for later in [age, age + 0.5, age + 10.0, age * 2.0] {
                assert_eq!(decayed(decay.ln(), later), 0.0, "{decay}^{later}");
            }
        }
        assert_eq!(first_zero_age(1.0), f64::INFINITY);
        assert_eq!(first_zero_age(0.0), f64::INFINITY);
    }
}
