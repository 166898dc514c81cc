//! `repair`: rebuild a damaged log from its intact frames.

use std::path::Path;
use std::time::Duration;

use super::format::{
    DATA_MAGIC, FILE_HEADER_LEN, FRAME_MAGIC, FRAME_PREFIX, FileHeader, INDEX_MAGIC, KIND_LOST,
    NONE, Node, RECORD_LEN, align8, crc, payload_fits_kind,
};
use super::recover::read_frame;
use super::{codec, files};
use crate::encoding::Encoding;
use crate::error::Result;

/// What `repair` kept and what it could not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Records intact and kept.
    pub kept: u64,
    /// Records lost (each left as a placeholder node, so later seqs keep their numbers).
    pub lost: u64,
    /// Bytes written to the data file (up to its last non-zero byte, rounded
    /// up to 8) that no intact frame holds.
    pub dropped_bytes: u64,
    /// Each problem found, naming the file and offset.
    pub problems: Vec<String>,
}

/// Rebuild the log in `dir` from the intact frames of its data file: new
/// files are written beside the old ones and renamed in (readers that have
/// the old ones open keep reading them). A lost record becomes a
/// placeholder node, so every later record keeps its seq and parent.
pub(super) fn repair(dir: &Path, lock_timeout: Duration) -> Result<RepairReport> {
    let _lock = files::lock_writer(dir, lock_timeout)?;
    let data = files::LogFile::open(dir, "data", false, false)?;
    let mut report = RepairReport::default();
    let mut head = [0u8; FILE_HEADER_LEN];
    let index = files::LogFile::open(dir, "index", false, false).ok();
    let (encoding, log_id) = {
        let got = index
            .as_ref()
            .map_or(Ok(0), |i| i.read_at_most(&mut head, 0))?;
        match FileHeader::decode(&head[..got], INDEX_MAGIC, "index") {
            Ok(h) if Encoding::from_name(&h.encoding).is_ok() => (h.encoding, h.log_id),
            // A log that opens must name an encoding this library counts in.
            Ok(h) => {
                report.problems.push(format!(
                    "index: damaged at byte 24: unknown encoding {:?}; counts assumed to be o200k_base",
                    h.encoding
                ));
                ("o200k_base".to_owned(), h.log_id)
            }
            Err(e) => {
                report
                    .problems
                    .push(format!("{e}; counts assumed to be o200k_base"));
                ("o200k_base".to_owned(), 0)
            }
        }
    };
    let got = data.read_at_most(&mut head, 0)?;
    if let Err(e) = FileHeader::decode(&head[..got], DATA_MAGIC, "data") {
        report.problems.push(e.to_string());
    }
    // Everything up to the last non-zero byte was written; past it is the
    // reserved, zero-filled end.
    let content_end = align8(last_nonzero_end(&data)?).max(FILE_HEADER_LEN as u64);
    let mut kept: Vec<(Node, Vec<u8>)> = Vec::new();
    let mut covered = 0;
    let mut at = FILE_HEADER_LEN as u64;
    let mut damaged_from: Option<u64> = None;
    while at < content_end {
        let mut found = read_frame(&data, at, None)?.filter(|(n, _)| n.seq >= kept.len() as u64);
        if found.is_none() {
            found = from_index(index.as_ref(), &data, at, kept.len() as u64)?;
            if let Some((node, _)) = &found {
                report.problems.push(format!(
                    "data: damaged at byte {at}: the frame header of node {} is damaged; \
                     rebuilt from its index record",
                    node.seq
                ));
            }
        }
        if let Some((node, stored)) = found {
            if let Some(from) = damaged_from.take() {
                report.problems.push(format!(
                    "data: damaged at byte {from}: {} bytes without an intact frame",
                    at - from
                ));
            }
            while (kept.len() as u64) < node.seq {
                kept.push((placeholder(kept.len() as u64), Vec::new()));
                report.lost += 1;
            }
            covered += node.frame_len();
            at = node.frame_end();
            kept.push((node, stored));
        } else {
            damaged_from.get_or_insert(at);
            at = next_frame_magic(&data, at + 8, content_end)?.unwrap_or(content_end);
        }
    }
    if let Some(from) = damaged_from {
        report.problems.push(format!(
            "data: damaged at byte {from}: {} bytes after the last intact frame",
            content_end - from
        ));
    }
    // The last frame may end in zero bytes past the last non-zero one.
    report.dropped_bytes = content_end.max(at) - FILE_HEADER_LEN as u64 - covered;
    report.kept = kept.len() as u64 - report.lost;
    write_rebuilt(dir, &kept, &encoding, log_id)?;
    Ok(report)
}

/// The frame at `at` rebuilt from the old index's record for `seq` when its
/// own copy of the header (or its magic) is damaged but its payload is that
/// record's: same place, well formed, the payload's hash and kind hold.
fn from_index(
    index: Option<&files::LogFile>,
    data: &files::LogFile,
    at: u64,
    seq: u64,
) -> Result<Option<(Node, Vec<u8>)>> {
    let Some(index) = index else {
        return Ok(None);
    };
    let mut record = [0u8; RECORD_LEN];
    let slot = (FILE_HEADER_LEN as u64).saturating_add(seq.saturating_mul(RECORD_LEN as u64));
    if index.read_at_most(&mut record, slot)? < RECORD_LEN {
        return Ok(None);
    }
    let Some(node) = Node::decode(&record, seq).filter(|n| n.problem(Some(at)).is_none()) else {
        return Ok(None);
    };
    let start = at + FRAME_PREFIX as u64;
    if start + u64::from(node.stored_len) > data.len()? {
        return Ok(None);
    }
    let mut stored = vec![0u8; node.stored_len as usize];
    data.read_exact_at(&mut stored, start)?;
    let intact = codec::decode(&stored, node.codec(), node.raw_len as usize)
        .is_ok_and(|raw| crc(&raw) == node.hash && payload_fits_kind(&node, &raw));
    Ok(intact.then_some((node, stored)))
}

/// Bytes read at a time while scanning a data file.
const SCAN_CHUNK: usize = 1 << 20;

/// The end of the last non-zero byte of `file` (0 if all zero).
fn last_nonzero_end(file: &files::LogFile) -> Result<u64> {
    let mut end = file.len()?;
    let mut buf = vec![0u8; SCAN_CHUNK];
    while end > 0 {
        let start = end.saturating_sub(SCAN_CHUNK as u64);
        let chunk = &mut buf[..(end - start) as usize];
        let got = file.read_at_most(chunk, start)?;
        if let Some(last) = chunk[..got].iter().rposition(|&b| b != 0) {
            return Ok(start + last as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// The first 8-aligned offset in `from..end` where a frame's magic starts.
fn next_frame_magic(file: &files::LogFile, from: u64, end: u64) -> Result<Option<u64>> {
    let finder = memchr::memmem::Finder::new(FRAME_MAGIC);
    let mut buf = vec![0u8; SCAN_CHUNK];
    let mut at = align8(from);
    while at < end {
        let want = ((end - at) as usize).min(SCAN_CHUNK);
        let got = file.read_at_most(&mut buf[..want], at)?;
        if got == 0 {
            break;
        }
        if let Some(found) = finder
            .find_iter(&buf[..got])
            .find(|&i| (at + i as u64).is_multiple_of(8))
        {
            return Ok(Some(at + found as u64));
        }
        // Keep the last bytes: a magic may straddle two chunks.
        if got < FRAME_MAGIC.len() {
            break;
        }
        at += (got - FRAME_MAGIC.len() + 1) as u64;
        at = align8(at);
    }
    Ok(None)
}

/// A node standing in for a record repair could not salvage.
fn placeholder(seq: u64) -> Node {
    Node {
        seq,
        parent: if seq == 0 { NONE } else { seq - 1 },
        timestamp: 0.0,
        offset: 0,
        stored_len: 0,
        raw_len: 0,
        tokens: 0,
        weight: f32::NAN,
        priority: 0.0,
        hash: crc(&[]),
        role: 4,
        kind: KIND_LOST,
        tags: 0,
        flags: 0,
    }
}

fn write_rebuilt(dir: &Path, nodes: &[(Node, Vec<u8>)], encoding: &str, old_id: u64) -> Result<()> {
    // A new log id: an old index can never be mistaken for the new data.
    let log_id = xxhash_rust::xxh3::xxh3_64(&old_id.to_le_bytes()) ^ 0x5eed;
    let header = |magic: &[u8; 8], record_len: u32, encoding: &str| {
        FileHeader {
            magic: *magic,
            record_len,
            log_id,
            encoding: encoding.to_owned(),
        }
        .encode()
    };
    let mut data = header(DATA_MAGIC, 0, "").to_vec();
    let mut index = header(INDEX_MAGIC, RECORD_LEN as u32, encoding).to_vec();
    for (node, stored) in nodes {
        let mut node = *node;
        node.offset = data.len() as u64;
        let record = node.encode();
        data.extend_from_slice(FRAME_MAGIC);
        data.extend_from_slice(&record);
        data.extend_from_slice(stored);
        data.resize(data.len().next_multiple_of(8), 0);
        index.extend_from_slice(&record);
    }
    // Both written before either is renamed in, data first: a crash
    // between the renames leaves files with different log ids, which open
    // refuses and a second repair finishes.
    files::replace_files(dir, &[("data", &data), ("index", &index)], true)?;
    // The checkpoint described the old files.
    match std::fs::remove_file(dir.join("meta")) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(files::storage(&dir.join("meta"), "remove", &e)),
    }
    files::sync_dir(dir)
}
