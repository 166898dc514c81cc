//! Tool results counted as cut to a policy's cap, remembered by seq.
//!
//! A header holds a message's whole count. A policy that caps tool results
//! counts a long one as its cut form, and cutting a 50 KB result costs more
//! than the rest of a turn. A record's payload never changes, so each result
//! over the cap is cut and counted once, the turn it first appears in; the
//! caller does that (it holds the decoded messages) and hands the counts in.
//! A sweep that finds a result it was not told of (appended since, by
//! another thread or process) says so, and the caller counts it and asks again.

use rustc_hash::FxHashMap;

use super::MessageLog;
use super::format::{FLAG_RESULTS, KIND_MESSAGE};
use super::window::Record;
use crate::error::Result;
use crate::select::Role;

/// Caps remembered at once (policies sharing a log with different caps).
const CAPS_KEPT: usize = 4;

/// The capped counts for each cap in use, the most recently used last.
#[derive(Default)]
pub(super) struct CappedCounts {
    caps: Vec<ForCap>,
}

struct ForCap {
    cap: usize,
    /// The records before this seq have been looked at for `cap`.
    scanned_to: u64,
    tokens: FxHashMap<u64, u32>,
}

impl CappedCounts {
    fn get(&self, cap: usize) -> Option<&ForCap> {
        self.caps.iter().find(|c| c.cap == cap)
    }

    fn get_mut(&mut self, cap: usize) -> &mut ForCap {
        if let Some(at) = self.caps.iter().position(|c| c.cap == cap) {
            // The least recently used goes first: this one moves to the end.
            let used = self.caps.remove(at);
            self.caps.push(used);
            let last = self.caps.len() - 1;
            return &mut self.caps[last];
        }
        if self.caps.len() == CAPS_KEPT {
            self.caps.remove(0); // counted again if it comes back
        }
        self.caps.push(ForCap {
            cap,
            scanned_to: 0,
            tokens: FxHashMap::default(),
        });
        let at = self.caps.len() - 1;
        &mut self.caps[at]
    }
}

/// Whether a record may hold a tool result cut at `cap`: a message whose
/// whole count is at or under the cap has no result over it.
fn may_be_cut(record: Record<'_>, cap: usize) -> bool {
    record.kind() == KIND_MESSAGE
        && record.tokens() > cap
        && (record.role() == Role::Tool || record.flags() & FLAG_RESULTS != 0)
}

impl MessageLog {
    /// The records not yet looked at for `cap` that may hold a tool result
    /// over it, and the range of records they were looked for in (to hand
    /// back to [`MessageLog::set_capped`] with their counts).
    pub fn over_cap(&mut self, cap: usize) -> Result<(Vec<u64>, u64, u64)> {
        self.refresh()?;
        self.ensure_checked()?;
        let from = self.capped.get_mut(cap).scanned_to;
        let seqs = (from..self.count)
            .filter(|&seq| may_be_cut(self.record(seq), cap))
            .collect();
        Ok((seqs, from, self.count))
    }

    /// Remember the capped counts of `counts` (seq, tokens) for `cap`, and
    /// that the records `from..upto` have all been looked at. Where the
    /// counts below `from` were let go since (other caps pushed this one
    /// out), only the counts are kept: the rest is looked at again.
    pub fn set_capped(&mut self, cap: usize, from: u64, upto: u64, counts: &[(u64, usize)]) {
        let count = self.count;
        let state = self.capped.get_mut(cap);
        for &(seq, tokens) in counts {
            if seq < count {
                state
                    .tokens
                    .insert(seq, u32::try_from(tokens).unwrap_or(u32::MAX));
            }
        }
        if state.scanned_to >= from {
            state.scanned_to = state.scanned_to.max(upto.min(count));
        }
    }

    /// Whether a record the log holds now may hold a result over `cap` that
    /// no count was handed in for (records with none are passed over once).
    pub(super) fn uncounted(&mut self, cap: Option<usize>) -> bool {
        let Some(cap) = cap else { return false };
        let mut at = self.capped.get_mut(cap).scanned_to;
        while at < self.count && !may_be_cut(self.record(at), cap) {
            at += 1;
        }
        self.capped.get_mut(cap).scanned_to = at;
        at < self.count
    }

    /// A record's tokens as a policy with `cap` counts them (a stand-in's,
    /// where one is set: see `stand_in`).
    pub(super) fn tokens_under_cap(
        &self,
        record: Record<'_>,
        seq: u64,
        cap: Option<usize>,
    ) -> usize {
        if let Some(tokens) = self.stand_in(seq) {
            return tokens;
        }
        let tokens = record.tokens();
        match cap {
            Some(cap) if tokens > cap => self
                .capped
                .get(cap)
                .and_then(|state| state.tokens.get(&seq))
                .map_or(tokens, |&capped| capped as usize),
            _ => tokens,
        }
    }
}
