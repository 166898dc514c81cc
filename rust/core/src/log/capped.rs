//! Tool results counted as cut to a policy's cap, remembered by seq.
//!
//! A header holds a message's whole count. A policy that caps tool results
//! counts a long one as its cut form, and cutting a 50 KB result costs more
//! than the rest of a turn. A record's payload never changes, so each result
//! over the cap is cut and counted once, the turn it first appears in; the
//! caller does that (it holds the decoded messages) and hands the counts in.

use rustc_hash::FxHashMap;

use super::MessageLog;
use super::format::{FLAG_RESULTS, KIND_MESSAGE};
use super::window::Record;
use crate::error::Result;
use crate::select::Role;

/// The capped counts for one cap.
#[derive(Default)]
pub(super) struct CappedCounts {
    cap: Option<usize>,
    /// The records before this seq have been looked at for `cap`.
    scanned_to: u64,
    tokens: FxHashMap<u64, u32>,
}

impl CappedCounts {
    fn reset_for(&mut self, cap: usize) {
        if self.cap != Some(cap) {
            *self = Self {
                cap: Some(cap),
                ..Self::default()
            };
        }
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
    /// over it, and the record count they were looked for below (to hand
    /// back to [`MessageLog::set_capped`] with their counts).
    pub fn over_cap(&mut self, cap: usize) -> Result<(Vec<u64>, u64)> {
        self.refresh()?;
        self.ensure_checked()?;
        self.capped.reset_for(cap);
        let seqs = (self.capped.scanned_to..self.count)
            .filter(|&seq| may_be_cut(self.record(seq), cap))
            .collect();
        Ok((seqs, self.count))
    }

    /// Remember the capped counts of `counts` (seq, tokens) for `cap`, and
    /// that the records below `upto` have all been looked at.
    pub fn set_capped(&mut self, cap: usize, upto: u64, counts: &[(u64, usize)]) {
        self.capped.reset_for(cap);
        for &(seq, tokens) in counts {
            if seq < self.count {
                let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
                self.capped.tokens.insert(seq, tokens);
            }
        }
        self.capped.scanned_to = self.capped.scanned_to.max(upto.min(self.count));
    }

    /// A record's tokens as a policy with `cap` counts them.
    pub(super) fn tokens_under_cap(
        &self,
        record: Record<'_>,
        seq: u64,
        cap: Option<usize>,
    ) -> usize {
        let tokens = record.tokens();
        match cap {
            Some(cap) if tokens > cap && self.capped.cap == Some(cap) => self
                .capped
                .tokens
                .get(&seq)
                .map_or(tokens, |&capped| capped as usize),
            _ => tokens,
        }
    }
}
