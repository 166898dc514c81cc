//! What compaction should do next, read from the headers of the active
//! path: the L1/L2/L3 hierarchy as the context view holds it.
//!
//! - L1 is the raw tail: the newest `recent_turns` turns are never summarised.
//! - L2 is a segment summary of the raw messages of the oldest
//!   `segment_turns` turns before L1 (fewer when the raw tail is over
//!   `tail_tokens`).
//! - L3 is the global summary of every L2 on the path (never of an older
//!   L3), due once `segments_kept` L2 wait after the newest L3.
//!
//! A turn starts at a user message with text of its own: one holding only
//! tool results continues the turn it answers. A background job calls this
//! with the interpreter released, so it reads only headers, and one payload
//! (the newest L2's range) for a global job.

use super::MessageLog;
use super::format::{
    FILE_HEADER_LEN, FLAG_PINNED, FLAG_RESULTS, KIND_MESSAGE, KIND_SUMMARY, RECORD_LEN,
    summary_covers,
};
use crate::error::{Error, Result};
use crate::tags::CONSTRAINT;

const ROLE_SYSTEM: u8 = 0;
const ROLE_USER: u8 = 1;

/// How compaction is shaped (see the module's documentation).
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    pub recent_turns: usize,
    pub segment_turns: usize,
    pub segments_kept: usize,
    pub tail_tokens: Option<u64>,
}

/// The next step, or how long nothing can be due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing is due before `turns` more turns start, or (with a tail
    /// bound) `tokens` more tokens are appended; `turns` 0: check again
    /// next turn.
    Wait { turns: u64, tokens: Option<u64> },
    /// Summarise: level 2 reads `messages` (anchors left out), level 3 the
    /// L2 `segments`. `rules` are the user's constraint-tagged messages in
    /// range (the compactor reads what each states); `base` the newest
    /// summary on the path (the write is refused if it changed).
    Job(Job),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub level: u8,
    pub covers: (u64, u64),
    pub messages: Vec<u64>,
    pub segments: Vec<u64>,
    pub rules: Vec<u64>,
    pub base: Option<u64>,
}

/// The header fields a plan reads, copied out of one index record.
#[derive(Clone, Copy)]
struct Head {
    seq: u64,
    tokens: u64,
    role: u8,
    kind: u8,
    tags: u8,
    flags: u8,
}

impl Head {
    fn level(self) -> u8 {
        self.flags >> 6
    }
    /// A user message without tool results. One that holds results (with
    /// text or not) answers the calls before it, so a segment may not end
    /// just before it: the next view would open on results without calls.
    fn starts_turn(self) -> bool {
        self.kind == KIND_MESSAGE && self.role == ROLE_USER && self.flags & FLAG_RESULTS == 0
    }
    fn is_anchor(self) -> bool {
        self.role == ROLE_SYSTEM || self.flags & FLAG_PINNED != 0
    }
    fn is_rule(self) -> bool {
        self.kind == KIND_MESSAGE && self.role == ROLE_USER && self.tags & CONSTRAINT != 0
    }
}

impl MessageLog {
    /// The next compaction step on the active path, or how long to wait.
    pub fn compaction_plan(&mut self, options: &PlanOptions) -> Result<Plan> {
        let path = self.path_to(None)?;
        let records = self.map.bytes();
        let heads: Vec<Head> = path
            .iter()
            .map(|&seq| {
                let at = FILE_HEADER_LEN + seq as usize * RECORD_LEN;
                let record = &records[at..at + RECORD_LEN];
                Head {
                    seq,
                    tokens: u64::from(u32::from_le_bytes(record[40..44].try_into().expect("4"))),
                    role: record[56],
                    kind: record[57],
                    tags: record[58],
                    flags: record[59],
                }
            })
            .collect();
        let pointer = self.last_summary_index()?;
        let plan = plan_over(&heads, pointer, options);
        match plan {
            Planned::Global { newest, base } => self.global_job(&heads, newest, base),
            Planned::Done(plan) => Ok(plan),
        }
    }

    fn global_job(&mut self, heads: &[Head], newest: u64, base: Option<u64>) -> Result<Plan> {
        let payload = self.read(&[newest as i64])?.pop().unwrap_or_default();
        let (_, last) = summary_covers(&payload).ok_or_else(|| Error::LogCorrupt {
            file: self.index.name(),
            offset: (FILE_HEADER_LEN + newest as usize * RECORD_LEN) as u64,
            reason: format!("summary {newest} names no range it covers"),
        })?;
        // Anchors (system, pinned) stay raw in every view: nothing need carry them.
        let rules = rules_in(heads.iter().filter(|h| h.seq <= last && !h.is_anchor()));
        Ok(Plan::Job(Job {
            level: 3,
            covers: (heads[0].seq, last),
            messages: Vec::new(),
            segments: heads
                .iter()
                .filter(|h| h.kind == KIND_SUMMARY && h.level() == 2)
                .map(|h| h.seq)
                .collect(),
            rules,
            base,
        }))
    }
}

/// The seqs of the user's rules among `heads`.
fn rules_in<'a>(heads: impl Iterator<Item = &'a Head>) -> Vec<u64> {
    heads.filter(|h| h.is_rule()).map(|h| h.seq).collect()
}

enum Planned {
    Done(Plan),
    /// A global job over the L2 up to `newest`'s range (its payload says).
    Global {
        newest: u64,
        base: Option<u64>,
    },
}

fn plan_over(heads: &[Head], pointer: Option<u64>, options: &PlanOptions) -> Planned {
    let PlanOptions {
        recent_turns,
        segment_turns,
        segments_kept,
        tail_tokens,
    } = *options;
    if heads.is_empty() {
        return Planned::Done(Plan::Wait {
            turns: recent_turns.saturating_add(segment_turns) as u64,
            tokens: tail_tokens.map(|t| t.saturating_add(1)),
        });
    }
    let summaries: Vec<Head> = heads
        .iter()
        .copied()
        .filter(|h| h.kind == KIND_SUMMARY)
        .collect();
    let last_global = summaries
        .iter()
        .rev()
        .find(|h| h.level() == 3)
        .map(|h| h.seq);
    let segments: Vec<u64> = summaries
        .iter()
        .filter(|h| h.level() == 2)
        .map(|h| h.seq)
        .collect();
    // Seqs rise along a path, so "after the global" compares seqs.
    let pending = segments
        .iter()
        .filter(|&&s| last_global.is_none_or(|g| s > g))
        .count();
    let base = summaries.last().map(|h| h.seq);
    let raw: Vec<Head> = heads
        .iter()
        .copied()
        .filter(|h| h.kind == KIND_MESSAGE && pointer.is_none_or(|p| h.seq > p))
        .collect();
    if raw.is_empty() {
        return Planned::Done(Plan::Wait {
            turns: 0,
            tokens: None,
        });
    }
    let starts: Vec<usize> = (0..raw.len()).filter(|&i| raw[i].starts_turn()).collect();
    let older = starts.len().saturating_sub(recent_turns); // turns before L1
    let tokens: u64 = raw.iter().map(|h| h.tokens).sum();
    let turns = if older >= segment_turns {
        segment_turns
    } else if older > 0 && tail_tokens.is_some_and(|t| tokens > t) {
        older
    } else {
        return Planned::Done(Plan::Wait {
            turns: recent_turns
                .saturating_add(segment_turns)
                .saturating_sub(starts.len()) as u64,
            tokens: tail_tokens.map(|t| t.saturating_add(1).saturating_sub(tokens).max(1)),
        });
    };
    if pending >= segments_kept {
        let newest = *segments.last().expect("pending segments exist");
        return Planned::Global { newest, base };
    }
    let chosen = &raw[..starts[turns]]; // up to the first raw node not covered
    let messages: Vec<u64> = chosen
        .iter()
        .filter(|h| !h.is_anchor())
        .map(|h| h.seq)
        .collect();
    if messages.is_empty() {
        return Planned::Done(Plan::Wait {
            turns: 0,
            tokens: None,
        });
    }
    let rules = rules_in(chosen.iter().filter(|h| !h.is_anchor()));
    Planned::Done(Plan::Job(Job {
        level: 2,
        covers: (chosen[0].seq, chosen[chosen.len() - 1].seq),
        messages,
        segments: Vec::new(),
        rules,
        base,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::format::FLAG_HAS_TEXT;
    use super::*;

    fn user(seq: u64) -> Head {
        Head {
            seq,
            tokens: 10,
            role: ROLE_USER,
            kind: KIND_MESSAGE,
            tags: 0,
            flags: FLAG_HAS_TEXT,
        }
    }

    fn options(recent_turns: usize, segment_turns: usize) -> PlanOptions {
        PlanOptions {
            recent_turns,
            segment_turns,
            segments_kept: 3,
            tail_tokens: None,
        }
    }

    #[test]
    fn an_empty_path_waits_for_a_whole_segment_and_the_tail() {
        match plan_over(&[], None, &options(4, 5)) {
            Planned::Done(plan) => assert_eq!(
                plan,
                Plan::Wait {
                    turns: 9,
                    tokens: None
                }
            ),
            Planned::Global { .. } => panic!("no global job on an empty path"),
        }
    }

    #[test]
    fn the_oldest_turns_before_the_recent_ones_are_one_segment() {
        let heads: Vec<Head> = (0..8).map(user).collect();
        let Planned::Done(Plan::Job(job)) = plan_over(&heads, None, &options(2, 3)) else {
            panic!("a job is due");
        };
        assert_eq!(
            (job.level, job.covers, job.messages),
            (2, (0, 2), vec![0, 1, 2])
        );
    }

    #[test]
    fn a_message_with_tool_results_continues_its_turn() {
        let mut result = user(1);
        result.flags = FLAG_RESULTS;
        assert!(!result.starts_turn());
        result.flags = FLAG_RESULTS | FLAG_HAS_TEXT;
        assert!(!result.starts_turn());
        result.flags = FLAG_HAS_TEXT;
        assert!(result.starts_turn());
    }
}
