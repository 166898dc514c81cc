//! The read path of the message log: mapping the index, checking records
//! as they are first seen, following parents, and decoding payloads. A
//! reader in another process catches up here with what the writer appended.

use std::path::Path;

use super::format::{FILE_HEADER_LEN, FRAME_MAGIC, FRAME_PREFIX};
use super::mapped::Mapped;
use super::{
    KIND_BRANCH, KIND_LOST, KIND_MESSAGE, KIND_SUMMARY, MessageLog, NONE, Node, Position,
    RECORD_LEN, codec, files, format, recover,
};
use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::select::Role;
use crate::tokenizer::Tokenizer;

impl MessageLog {
    /// Index slots the current map covers.
    pub(super) fn slots(&self) -> u64 {
        self.map.len().saturating_sub(FILE_HEADER_LEN as u64) / RECORD_LEN as u64
    }

    pub(super) fn slot_bytes(&self, seq: u64) -> &[u8] {
        let at = FILE_HEADER_LEN + seq as usize * RECORD_LEN;
        &self.map.bytes()[at..at + RECORD_LEN]
    }

    /// Extend `count` over records committed since it was last looked at.
    /// Each is checked whole before it counts: a record whose check matches
    /// but whose fields cannot be (a parent that is not earlier, a frame
    /// that does not follow the last one, lengths the format cannot hold) is
    /// damage, refused before any parent link is followed or buffer sized.
    pub(super) fn scan_new_records(&mut self) -> Result<()> {
        let slots = self.slots();
        while self.count < slots {
            // Copied out first: a writer may be filling this slot right now.
            let record = self.slot_copy(self.count).expect("a slot inside the map");
            let Some(node) = Node::decode(&record, self.count) else {
                break;
            };
            if let Some(problem) = node.problem(Some(self.data_end)) {
                return Err(Error::LogCorrupt {
                    file: self.index.name(),
                    offset: (FILE_HEADER_LEN + self.count as usize * RECORD_LEN) as u64,
                    reason: problem,
                });
            }
            self.data_end = node.frame_end();
            self.count += 1;
        }
        Ok(())
    }

    /// Check every record not checked yet, before anything reads the
    /// headers in place (the views, the window, paths, `records`): once per
    /// record and handle, not once per turn. Records a checkpoint vouched for
    /// at open are the ones not checked there: checking a million costs
    /// ~20 ms, which open does not pay, the first sweep over them does.
    pub(super) fn ensure_checked(&mut self) -> Result<()> {
        let mut expected = self.frame_end_before(self.checked)?;
        while self.checked < self.count {
            expected = self.checked_node(self.checked, expected)?.frame_end();
            self.checked += 1;
        }
        Ok(())
    }

    /// Where the frame of record `seq` must start: the end of the one before.
    pub(super) fn frame_end_before(&self, seq: u64) -> Result<u64> {
        Ok(match seq {
            0 => FILE_HEADER_LEN as u64,
            n => self.node(n - 1)?.frame_end(),
        })
    }

    /// Record `seq`, valid and well formed, its frame at `expected`.
    pub(super) fn checked_node(&self, seq: u64, expected: u64) -> Result<Node> {
        let node = self.node(seq)?;
        match node.problem(Some(expected)) {
            None => Ok(node),
            Some(problem) => Err(Error::LogCorrupt {
                file: self.index.name(),
                offset: (FILE_HEADER_LEN + seq as usize * RECORD_LEN) as u64,
                reason: problem,
            }),
        }
    }

    /// A copy of index slot `seq`, if the map holds it.
    pub(super) fn slot_copy(&self, seq: u64) -> Option<[u8; RECORD_LEN]> {
        (seq < self.slots()).then(|| self.slot_bytes(seq).try_into().expect("64 bytes"))
    }

    pub(super) fn remap(&mut self) -> Result<()> {
        self.map = Mapped::map(self.index.handle()?, self.index_len)
            .map_err(|e| files::storage(&self.index.path, "map", &e))?;
        Ok(())
    }

    /// Before each operation: no file shorter than what is mapped or
    /// indexed (else an error, never a read past the end); for a reader,
    /// the records the writer committed since.
    pub(super) fn refresh(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::LogClosed {
                reason: "the message log is closed",
            });
        }
        let index_len = self.index.len()?;
        if index_len < self.map.len() {
            return Err(Error::LogCorrupt {
                file: self.index.name(),
                offset: index_len,
                reason: format!("truncated under this reader (was {} bytes)", self.map.len()),
            });
        }
        if !self.readonly {
            // The writer reads the data file with pread only: no map to guard.
            return Ok(());
        }
        let before = self.count;
        // The records before a damaged one still count, and move the head.
        let scanned = self.catch_up(index_len);
        let mut position = self.position;
        for seq in before..self.count {
            position = self.advance(position, &self.node(seq)?)?;
        }
        self.position = position;
        scanned
    }

    /// A reader's view of what the writer committed since it last looked:
    /// the index mapped as far as it now reaches (`index_len`, just read),
    /// the new records scanned. A record scanned here may have its frame
    /// past the data length read here (the writer grew the file since):
    /// [`MessageLog::payload_of`] reads the length again before it says so.
    pub(super) fn catch_up(&mut self, index_len: u64) -> Result<()> {
        let data_len = self.data.len()?;
        if data_len < self.data_end {
            return Err(Error::LogCorrupt {
                file: self.data.name(),
                offset: data_len,
                reason: format!(
                    "truncated under this reader (records reach byte {})",
                    self.data_end
                ),
            });
        }
        if index_len > self.index_len {
            self.index_len = index_len;
            self.remap()?;
        }
        self.data_len = data_len;
        self.scan_new_records()
    }

    /// The position after node `node` was appended.
    pub(super) fn advance(&self, position: Position, node: &Node) -> Result<Position> {
        if node.kind == KIND_BRANCH {
            return self.position_back_to(position, node.parent);
        }
        if node.parent != position.head {
            return self.position_at(node.seq);
        }
        let mut next = position;
        next.head = node.seq;
        if node.kind == KIND_SUMMARY {
            next.summary = node.seq;
            next.summary_last = self.summary_covers(node)?.1;
        }
        Ok(next)
    }

    /// The position after a rewind from `position` to `target`. Where
    /// `target` is on the current path, at or after the path's newest
    /// summary (or the path has none), that summary stands: found by
    /// walking back from the head to `target` (a failed turn's input taken
    /// back: one step), not from `target` to the root (at a million
    /// messages, tens of milliseconds a rewind).
    fn position_back_to(&self, position: Position, target: u64) -> Result<Position> {
        if position.summary == NONE || position.summary <= target {
            let mut seq = position.head;
            while seq != NONE && seq > target {
                seq = self.parent_of(&self.node(seq)?)?;
            }
            if seq == target {
                return Ok(Position {
                    head: target,
                    ..position
                });
            }
        }
        self.position_at(target)
    }

    /// The position with `head` as the head: the newest summary on its path.
    pub(super) fn position_at(&self, head: u64) -> Result<Position> {
        let mut seq = head;
        while seq != NONE {
            let node = self.node(seq)?;
            if node.kind == KIND_SUMMARY {
                return Ok(Position {
                    head,
                    summary: seq,
                    summary_last: self.summary_covers(&node)?.1,
                });
            }
            seq = self.parent_of(&node)?;
        }
        Ok(Position {
            head,
            ..Position::EMPTY
        })
    }

    /// A node's parent, refused unless it is earlier: every walk toward the
    /// root then ends, whatever a damaged or crafted record says.
    pub(super) fn parent_of(&self, node: &Node) -> Result<u64> {
        if node.parent == NONE || node.parent < node.seq {
            return Ok(node.parent);
        }
        Err(Error::LogCorrupt {
            file: self.index.name(),
            offset: (FILE_HEADER_LEN + node.seq as usize * RECORD_LEN + 8) as u64,
            reason: format!("node {} names a later parent {}", node.seq, node.parent),
        })
    }

    /// `(first, last)` of a summary node, from its payload's `"covers":[a,b]`.
    pub(super) fn summary_covers(&self, node: &Node) -> Result<(u64, u64)> {
        let payload = self.payload_of(node)?;
        format::summary_covers(&payload).ok_or_else(|| Error::LogCorrupt {
            file: self.data.name(),
            offset: node.offset,
            reason: "summary payload without \"covers\":[first,last]".into(),
        })
    }

    // -- reading ---------------------------------------------------------------

    #[allow(clippy::len_without_is_empty)] // it refreshes, so it is not a plain accessor
    pub fn len(&mut self) -> Result<u64> {
        self.refresh()?;
        Ok(self.count)
    }

    /// The header of node `seq`, checked.
    pub fn node(&self, seq: u64) -> Result<Node> {
        if seq >= self.slots() {
            return Err(Error::LogIndex {
                seq: seq as i64,
                len: self.count,
            });
        }
        Node::decode(self.slot_bytes(seq), seq).ok_or_else(|| Error::LogCorrupt {
            file: self.index.name(),
            offset: (FILE_HEADER_LEN + seq as usize * RECORD_LEN) as u64,
            reason: format!("record {seq} fails its checksum"),
        })
    }

    pub(super) fn checked_seq(&self, seq: i64) -> Result<u64> {
        let resolved = if seq < 0 {
            self.count as i64 + seq
        } else {
            seq
        };
        if resolved < 0 || resolved as u64 >= self.count {
            return Err(Error::LogIndex {
                seq,
                len: self.count,
            });
        }
        Ok(resolved as u64)
    }

    /// Header of `seq` (negative counts from the end).
    pub fn header(&mut self, seq: i64) -> Result<Node> {
        self.refresh()?;
        let seq = self.checked_seq(seq)?;
        self.node(seq)
    }

    /// The raw (decompressed) payload of each of `seqs`.
    pub fn read(&mut self, seqs: &[i64]) -> Result<Vec<Vec<u8>>> {
        self.refresh()?;
        seqs.iter()
            .map(|&seq| {
                let seq = self.checked_seq(seq)?;
                self.payload_of(&self.node(seq)?)
            })
            .collect()
    }

    /// A node's payload, checked against its frame and hash. Nothing is
    /// sized by the header before the header is checked against the format
    /// and the frame against the data file's length.
    pub(super) fn payload_of(&self, node: &Node) -> Result<Vec<u8>> {
        let corrupt = |offset: u64, reason: &str| Error::LogCorrupt {
            file: self.data.name(),
            offset,
            reason: format!("node {}: {reason}", node.seq),
        };
        if let Some(problem) = node.problem(None) {
            return Err(corrupt(node.offset, &problem));
        }
        let frame_len = FRAME_PREFIX as u64 + u64::from(node.stored_len);
        // The length last read can be behind a writer's growth: look again
        // before calling a frame past the end.
        let frame_end = node.offset.saturating_add(frame_len);
        if frame_end > self.data_len && frame_end > self.data.len()? {
            return Err(corrupt(
                node.offset,
                &format!(
                    "a frame of {frame_len} bytes past the end of the file ({} bytes)",
                    self.data_len
                ),
            ));
        }
        let mut frame = vec![0u8; frame_len as usize];
        self.data.read_exact_at(&mut frame, node.offset)?;
        if &frame[..8] != FRAME_MAGIC {
            return Err(corrupt(node.offset, "no frame where the index points"));
        }
        if frame[8..FRAME_PREFIX] != node.encode() {
            return Err(corrupt(
                node.offset + 8,
                "the frame's header differs from the index record",
            ));
        }
        let raw = codec::decode(&frame[FRAME_PREFIX..], node.codec(), node.raw_len as usize)
            .map_err(|reason| corrupt(node.offset + FRAME_PREFIX as u64, &reason))?;
        if format::crc(&raw) != node.hash {
            return Err(corrupt(
                node.offset + FRAME_PREFIX as u64,
                "payload checksum does not match",
            ));
        }
        Ok(raw)
    }

    /// The committed index records, 64 bytes each, as mapped.
    pub fn records(&mut self) -> Result<&[u8]> {
        self.refresh()?;
        self.ensure_checked()?;
        let end = FILE_HEADER_LEN + self.count as usize * RECORD_LEN;
        Ok(&self.map.bytes()[FILE_HEADER_LEN..end])
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The index file this log opened (for a second, read-only map of it).
    pub fn index_file(&mut self) -> Result<&std::fs::File> {
        self.refresh()?;
        self.index.handle()
    }

    pub fn encoding(&self) -> Encoding {
        self.tokenizer.encoding()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn is_readonly(&self) -> bool {
        self.readonly
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn head(&mut self) -> Result<Option<u64>> {
        self.refresh()?;
        Ok(Some(self.position.head).filter(|&h| h != NONE))
    }

    pub fn last_summary_index(&mut self) -> Result<Option<u64>> {
        self.refresh()?;
        Ok(Some(self.position.summary_last).filter(|&s| s != NONE))
    }

    /// Seqs from the root to `head` (default: the active head).
    pub fn path_to(&mut self, head: Option<i64>) -> Result<Vec<u64>> {
        self.refresh()?;
        self.ensure_checked()?;
        let mut seq = match head {
            Some(head) => self.checked_seq(head)?,
            None if self.position.head == NONE => return Ok(Vec::new()),
            None => self.position.head,
        };
        // Committed headers are read in place, unchecked: a walk over a
        // million of them must not checksum each (`verify` does; a kept
        // node's header is checked against its frame when it is read).
        let mut path = Vec::new();
        let records = self.map.bytes();
        while seq != NONE {
            let at = FILE_HEADER_LEN + seq as usize * RECORD_LEN;
            let record = &records[at..at + RECORD_LEN];
            let kind = record[57];
            if kind != KIND_BRANCH && kind != KIND_LOST {
                path.push(seq);
            }
            let parent = u64::from_le_bytes(record[8..16].try_into().expect("8 bytes"));
            if parent != NONE && parent >= seq {
                return Err(Error::LogCorrupt {
                    file: self.index.name(),
                    offset: (at + 8) as u64,
                    reason: format!("node {seq} names a later parent {parent}"),
                });
            }
            seq = parent;
        }
        path.reverse();
        Ok(path)
    }

    /// How many turns the active path holds: its user messages that are not
    /// tool results alone (results with no text of their own), as a session
    /// starts a turn (results beside an image or blank text, a turn to a
    /// session, read as results alone: the header does not tell them
    /// apart). Walked back from the head through the parent links, as
    /// [`path_to`](Self::path_to) is, without building the path.
    pub fn turn_starts(&mut self) -> Result<u64> {
        self.refresh()?;
        self.ensure_checked()?;
        let mut seq = self.position.head;
        let mut turns = 0;
        while seq != NONE {
            let record = self.record(seq);
            if record.kind() == KIND_MESSAGE {
                let facts = record.facts();
                turns += u64::from(facts.role == Role::User && (facts.has_text || !facts.results));
            }
            let parent = record.parent();
            if parent != NONE && parent >= seq {
                return Err(Error::LogCorrupt {
                    file: self.index.name(),
                    offset: (FILE_HEADER_LEN + seq as usize * RECORD_LEN + 8) as u64,
                    reason: format!("node {seq} names a later parent {parent}"),
                });
            }
            seq = parent;
        }
        Ok(turns)
    }

    /// The file headers, every record and frame, and what follows the last
    /// record (nothing, or an append in flight while a writer has the log):
    /// the first problem as an error.
    pub fn verify(&mut self) -> Result<()> {
        self.refresh()?;
        let log_id = self.log_id;
        if self.read_file_headers()? != self.encoding() || self.log_id != log_id {
            self.log_id = log_id;
            return Err(Error::LogCorrupt {
                file: self.index.name(),
                offset: 16,
                reason: "the file header changed since the log was opened".into(),
            });
        }
        self.verify_records(0)?;
        let mut tail = recover::examine(self, recover::Mode::Look)?;
        let suspect = tail.stranded.is_some() || tail.torn || tail.unindexed > 0;
        // A reader cannot judge the bytes past the end while a writer may be
        // writing them: only without one (or for the writer itself) are they
        // settled. The lock is asked for only when there is something to judge.
        let _hold = if self.readonly && suspect {
            let Some(hold) = files::hold_if_no_writer(&self.dir)? else {
                return Ok(());
            };
            let checked = self.count;
            self.refresh()?;
            self.verify_records(checked)?;
            tail = recover::examine(self, recover::Mode::Look)?;
            Some(hold)
        } else {
            None
        };
        if let Some(damage) = tail.stranded {
            return Err(damage);
        }
        if tail.torn || tail.unindexed > 0 {
            let index_end = (FILE_HEADER_LEN + self.count as usize * RECORD_LEN) as u64;
            return Err(Error::LogCorrupt {
                file: self.index.name(),
                offset: index_end,
                reason: format!(
                    "a torn tail follows the last record{} (opening the log for writing cuts it)",
                    if tail.unindexed > 0 {
                        format!(
                            ", with frames of {} records the index lacks",
                            tail.unindexed
                        )
                    } else {
                        String::new()
                    }
                ),
            });
        }
        Ok(())
    }

    pub(super) fn verify_records(&self, from: u64) -> Result<()> {
        let mut expected = self.frame_end_before(from)?;
        for seq in from..self.count {
            let node = self.checked_node(seq, expected)?;
            self.payload_of(&node)?;
            expected = node.frame_end();
        }
        Ok(())
    }
}
