//! Counts that stand in for some records' own during one selection.
//!
//! A session whose turn in progress outgrows the window sends the turn's
//! older tool results as short notes (the log keeps them whole). The
//! window over the log is then chosen with each such record counted as
//! its note: from the headers, as any turn is, where decoding the whole
//! view to replace them costs about a second at 200,000 messages.
//!
//! A stand-in is for one selection (the caller sets them before it and
//! none after). The units it counts in are never kept between selections
//! (see `stable`): kept units that reach a stood-in record are grouped
//! again, and any grouped with one serve that selection only. (A session's
//! stand-ins are of the turn in progress, grouped anew each selection.)

use super::MessageLog;

impl MessageLog {
    /// Counts `counts` ((seq, tokens), any order; a repeated seq keeps its
    /// first) in place of those records' own until set again; empty for
    /// none.
    pub fn set_stand_ins(&mut self, counts: &[(u64, usize)]) {
        let mut sorted = counts.to_vec();
        sorted.sort_by_key(|&(seq, _)| seq);
        sorted.dedup_by_key(|&mut (seq, _)| seq);
        self.stand_ins = sorted;
    }

    /// The count standing in for record `seq`, if one does.
    pub(super) fn stand_in(&self, seq: u64) -> Option<usize> {
        if self.stand_ins.is_empty() {
            return None;
        }
        self.stand_ins
            .binary_search_by_key(&seq, |&(s, _)| s)
            .ok()
            .map(|at| self.stand_ins[at].1)
    }

    /// The least stood-in seq, if any is set.
    pub(super) fn first_stand_in(&self) -> Option<u64> {
        self.stand_ins.first().map(|&(seq, _)| seq)
    }
}
