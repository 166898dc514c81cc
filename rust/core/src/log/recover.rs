//! What follows the last committed record: settled when a writer opens,
//! looked at when a reader opens or a log is verified.
//!
//! A crash leaves a torn tail: a frame or record written only in part,
//! frames the index had not caught up with, records whose frames never
//! reached the disk. A writer cuts the first, indexes the second and drops
//! the third; none of it holds an intact acknowledged record. Damage in the
//! middle of a log is another thing: an intact record or frame past the
//! first bad one. Nothing intact is ever cut for it. Opening refuses the log
//! with [`Error::LogCorrupt`] naming the damage, and `repair` salvages every
//! intact frame.

use std::ops::ControlFlow;

use super::files::{self, LogFile};
use super::format::{
    FILE_HEADER_LEN, FRAME_MAGIC, FRAME_PREFIX, Node, RECORD_LEN, crc, payload_fits_kind,
    record_is_valid,
};
use super::{MessageLog, codec};
use crate::error::{Error, Result};

/// Bytes read at a time while looking past the last record.
const CHUNK: usize = 1 << 20;

/// Whether opening may change the files.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A writer's open: cut the torn tail, index the frames the index missed.
    Settle,
    /// A reader's open, or `verify`: change nothing.
    Look,
}

/// What follows the committed records.
pub(super) struct Tail {
    /// Records kept, with the frames the index missed (written under `Settle`).
    pub count: u64,
    /// Frames the index missed (indexed under `Settle`).
    pub unindexed: u64,
    /// Non-zero bytes past the records and frames above, in the index and
    /// in data: a torn tail, zeroed under `Settle`.
    pub torn: bool,
    /// Intact records or frames past the damage: the log must be repaired.
    pub stranded: Option<Error>,
}

/// A frame read back whole at `offset` (of node `expected_seq`, if given):
/// its node and stored payload, if intact: header and payload checked, and
/// the payload what its kind holds (so a log rebuilt from intact frames
/// opens). No length is trusted before it is bounded by the file and the
/// format.
pub(super) fn read_frame(
    data: &LogFile,
    offset: u64,
    expected_seq: Option<u64>,
) -> Result<Option<(Node, Vec<u8>)>> {
    let mut prefix = [0u8; FRAME_PREFIX];
    if data.read_at_most(&mut prefix, offset)? < FRAME_PREFIX || &prefix[..8] != FRAME_MAGIC {
        return Ok(None);
    }
    let seq = u64::from_le_bytes(prefix[8..16].try_into().expect("8 bytes"));
    if expected_seq.is_some_and(|e| e != seq) {
        return Ok(None);
    }
    let Some(node) = Node::decode(&prefix[8..], seq).filter(|n| n.problem(Some(offset)).is_none())
    else {
        return Ok(None);
    };
    let end = offset + FRAME_PREFIX as u64 + u64::from(node.stored_len);
    if end > data.len()? {
        return Ok(None);
    }
    let mut stored = vec![0u8; node.stored_len as usize];
    data.read_exact_at(&mut stored, offset + FRAME_PREFIX as u64)?;
    let intact = codec::decode(&stored, node.codec(), node.raw_len as usize)
        .is_ok_and(|raw| crc(&raw) == node.hash && payload_fits_kind(&node, &raw));
    Ok(intact.then_some((node, stored)))
}

/// Look past the committed records (and, under `Settle`, put the tail right
/// where nothing intact is at stake). The caller applies `count` and
/// `data_end`; under `Settle` with `stranded` set, nothing was cut.
pub(super) fn examine(log: &mut MessageLog, mode: Mode) -> Result<Tail> {
    // The first slot that is not a valid record: where the log ends.
    let prefix = log.count;
    let mut count = prefix;
    if mode == Mode::Settle {
        // Records whose frames did not reach the disk, from the last back.
        // Only a frame that was never written is cut: one that was, and is
        // damaged now, holds what repair may still rebuild.
        while count > 0 {
            let node = log.node(count - 1)?;
            match log.payload_of(&node) {
                Ok(_) => break,
                Err(Error::LogCorrupt { .. }) if never_written(&log.data, &node)? => count -= 1,
                Err(Error::LogCorrupt { .. }) => return Err(damaged_frame(log, &node)),
                Err(other) => return Err(other),
            }
        }
    }
    let mut data_end = log.frame_end_before(count)?;
    // Frames after the last record that the index missed: each intact, of
    // the next seq, and not contradicted by a valid record in its slot.
    let mut unindexed = 0;
    while let Some((node, _)) = read_frame(&log.data, data_end, Some(count))? {
        if let Some(slot) = log.slot_copy(count)
            && record_is_valid(&slot, count)
            && slot != node.encode()
        {
            break;
        }
        if mode == Mode::Settle {
            let at = FILE_HEADER_LEN as u64 + count * RECORD_LEN as u64;
            log.reserve(at + RECORD_LEN as u64, node.frame_end())?;
            log.index.write_all_at(&node.encode(), at)?;
        }
        count += 1;
        unindexed += 1;
        data_end = node.frame_end();
    }
    // A reader cannot pass the first invalid slot, even where the frames
    // behind it would let a writer index it again.
    let visible = if mode == Mode::Look { prefix } else { count };
    let records = survey_index(&log.index, prefix.max(visible))?;
    let frames = survey_data(&log.data, data_end)?;
    let stranded = records
        .first_valid
        .filter(|&slot| slot >= visible)
        .map(|slot| stranded_records(log, prefix, slot, records.valid, count))
        .or_else(|| {
            frames
                .first_intact
                .map(|(at, seq)| stranded_frame(log, data_end, at, seq))
        });
    let index_from = FILE_HEADER_LEN as u64 + count * RECORD_LEN as u64;
    // The records cut above lie between `count` and `prefix`.
    let cut = count < prefix;
    let torn = cut || !records.nonzero.is_empty() || !frames.nonzero.is_empty();
    if mode == Mode::Settle && stranded.is_none() && torn {
        let cut_end = FILE_HEADER_LEN as u64 + prefix * RECORD_LEN as u64;
        if cut {
            zero(&log.index, index_from, cut_end)?;
        }
        for &(start, end) in &records.nonzero {
            zero(&log.index, start.max(index_from), end)?;
        }
        for &(start, end) in &frames.nonzero {
            zero(&log.data, start, end)?;
        }
    }
    if mode == Mode::Settle && (unindexed > 0 || (torn && stranded.is_none())) {
        log.data.sync()?;
        log.index.sync()?;
    }
    Ok(Tail {
        count,
        unindexed,
        torn,
        stranded,
    })
}

/// Whether a record's frame was never written (a torn tail after a crash
/// or a power loss): the file ends before it does, or some sector of it is
/// blank (a sector that never reached the disk reads as zeros; a disk
/// writes a 512-byte sector whole or not at all). Damage to a frame that was
/// written blanks no sector.
fn never_written(data: &LogFile, node: &Node) -> Result<bool> {
    const SECTOR: u64 = 512;
    if node.problem(None).is_some() {
        return Ok(false); // malformed: damage, not a torn write
    }
    let end = node.offset + FRAME_PREFIX as u64 + u64::from(node.stored_len);
    if end > data.len()? {
        return Ok(true);
    }
    let mut frame = vec![0u8; (end - node.offset) as usize];
    data.read_exact_at(&mut frame, node.offset)?;
    let mut at = node.offset;
    while at < end {
        let next = ((at / SECTOR + 1) * SECTOR).min(end);
        let part = &frame[(at - node.offset) as usize..(next - node.offset) as usize];
        // A short part can be zero by chance (an LZ4 offset's high byte).
        if (part.len() >= 8 || part.len() == frame.len()) && part.iter().all(|&b| b == 0) {
            return Ok(true);
        }
        at = next;
    }
    Ok(false)
}

fn damaged_frame(log: &MessageLog, node: &Node) -> Error {
    Error::LogCorrupt {
        file: log.data.name(),
        offset: node.offset,
        reason: format!(
            "record {}'s frame is damaged, not torn (it was written: no sector of it is \
             blank); nothing is cut: run repair, which rebuilds it from the index record \
             if its payload is intact",
            node.seq
        ),
    }
}

fn stranded_records(log: &MessageLog, prefix: u64, first: u64, valid: u64, healable: u64) -> Error {
    let fix = if first < healable {
        "opening the log for writing indexes them again from their intact frames, \
         and repair salvages them"
    } else {
        "nothing intact is cut: run repair to salvage them"
    };
    Error::LogCorrupt {
        file: log.index.name(),
        offset: FILE_HEADER_LEN as u64 + prefix * RECORD_LEN as u64,
        reason: format!(
            "record {prefix} is damaged, yet {valid} later records are intact \
             (the first is record {first}); {fix}"
        ),
    }
}

fn stranded_frame(log: &MessageLog, data_end: u64, at: u64, seq: u64) -> Error {
    Error::LogCorrupt {
        file: log.data.name(),
        offset: data_end,
        reason: format!(
            "no intact frame where the next record's must start, yet the frame of node {seq} \
             at byte {at} is intact; nothing intact is cut: run repair to salvage it"
        ),
    }
}

/// What lies in a file from some offset on.
#[derive(Default)]
struct Survey {
    /// Stretches that hold non-zero bytes, a chunk at a time (merged).
    nonzero: Vec<(u64, u64)>,
    /// Valid records for their slots (index only): how many, and the first.
    valid: u64,
    first_valid: Option<u64>,
    /// The first intact frame, at `(offset, seq)` (data only).
    first_intact: Option<(u64, u64)>,
}

impl Survey {
    fn saw_nonzero(&mut self, start: u64, end: u64) {
        match self.nonzero.last_mut() {
            Some(last) if last.1 >= start => last.1 = last.1.max(end),
            _ => self.nonzero.push((start, end)),
        }
    }
}

/// Read what `file` holds from `from` (a multiple of `align`) on, skipping
/// holes, in chunks that start on a multiple of `align`.
fn for_each_chunk(
    file: &LogFile,
    from: u64,
    align: u64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<ControlFlow<()>>,
) -> Result<()> {
    let mut buf = Vec::new();
    for (start, end) in files::data_regions(file, from)? {
        let mut at = from.max(start - (start - from) % align);
        while at < end {
            let want = ((end - at) as usize).min(CHUNK);
            buf.resize(want, 0);
            let got = file.read_at_most(&mut buf, at)?;
            if got == 0 {
                return Ok(());
            }
            if visit(at, &buf[..got])?.is_break() {
                return Ok(());
            }
            at += got as u64;
        }
    }
    Ok(())
}

/// The index from slot `first` on: valid records and non-zero bytes.
fn survey_index(index: &LogFile, first: u64) -> Result<Survey> {
    let mut survey = Survey::default();
    let from = FILE_HEADER_LEN as u64 + first * RECORD_LEN as u64;
    for_each_chunk(index, from, RECORD_LEN as u64, |at, bytes| {
        for (i, record) in bytes.chunks(RECORD_LEN).enumerate() {
            if record.iter().all(|&b| b == 0) {
                continue;
            }
            let offset = at + (i * RECORD_LEN) as u64;
            survey.saw_nonzero(offset, offset + record.len() as u64);
            let slot = (offset - FILE_HEADER_LEN as u64) / RECORD_LEN as u64;
            if let Ok(record) = <&[u8; RECORD_LEN]>::try_from(record)
                && record_is_valid(record, slot)
            {
                survey.valid += 1;
                survey.first_valid.get_or_insert(slot);
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(survey)
}

/// The data file from `from` on: the first intact frame and non-zero bytes.
fn survey_data(data: &LogFile, from: u64) -> Result<Survey> {
    let mut survey = Survey::default();
    let finder = memchr::memmem::Finder::new(FRAME_MAGIC);
    for_each_chunk(data, from, 8, |at, bytes| {
        let Some(first) = bytes.iter().position(|&b| b != 0) else {
            return Ok(ControlFlow::Continue(()));
        };
        let last = bytes.iter().rposition(|&b| b != 0).unwrap_or(first);
        survey.saw_nonzero(at + first as u64, at + last as u64 + 1);
        // Chunks start on a multiple of 8 and frames do too: a frame's magic
        // never straddles two chunks.
        for i in finder.find_iter(bytes).filter(|i| i % 8 == 0) {
            let offset = at + i as u64;
            if let Some((node, _)) = read_frame(data, offset, None)? {
                survey.first_intact = Some((offset, node.seq));
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(survey)
}

/// Zero `file` over `start..end`.
fn zero(file: &LogFile, start: u64, end: u64) -> Result<()> {
    let zeros = vec![0u8; CHUNK.min((end.saturating_sub(start)) as usize)];
    let mut at = start;
    while at < end {
        let n = ((end - at) as usize).min(zeros.len());
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}
