//! The message log: an append-only store of conversation nodes (messages,
//! summaries, branch markers) with fixed-size headers read through mmap and
//! payloads in a data file; crash-safe, one writer, many readers.
//! `docs/log-format.md` is the byte-level specification.

mod codec;
mod files;
mod fork;
mod format;
mod mapped;
mod recover;
mod repair;
mod sync;
mod window;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use files::storage;
pub use fork::Origin;
pub use format::{
    CODEC_LZ4, CODEC_RAW, FLAG_CALLS, FLAG_HAS_TEXT, FLAG_PINNED, FLAG_RESULTS, KIND_BRANCH,
    KIND_LOST, KIND_MESSAGE, KIND_SUMMARY, NONE, Node, RECORD_LEN,
};
pub use repair::RepairReport;
pub use window::{SEGMENTS_KEPT, ViewPart, Window};

use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::json::{Json, JsonValue};
use crate::select::analyze_message;
use crate::tags::Tagger;
use crate::tokenizer::Tokenizer;
use files::{LogFile, grown_len};
use format::{
    Checkpoint, DATA_MAGIC, FILE_HEADER_LEN, FRAME_MAGIC, FRAME_PREFIX, FileHeader, INDEX_MAGIC,
    META_MAGIC,
};
use mapped::Mapped;
use sync::Syncer;

/// When appends reach the disk (a process crash loses nothing acknowledged
/// in any mode: every append is in the OS before it returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` of data, then index, before each append returns.
    Always,
    /// Synced by a background thread every [`BATCH_WINDOW`] while appends
    /// happen, and on flush and close.
    Batch,
    /// Synced only on flush and close.
    Never,
}

/// How a level-3 (global) summary reads to the model: a system message with
/// this prefix (shared with the selection policies' summaries).
pub const SUMMARY_PREFIX: &str = "Summary of the conversation so far:\n";
/// How a level-2 (segment) summary reads to the model.
pub const SEGMENT_PREFIX: &str = "Summary of an earlier part of the conversation:\n";

/// The most a power failure can take under [`Durability::Batch`].
pub const BATCH_WINDOW: Duration = Duration::from_millis(20);

const INDEX_MIN_STEP: u64 = 64 << 10;
const DATA_MIN_STEP: u64 = 1 << 20;

#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub create: bool,
    pub readonly: bool,
    /// `None`: the log's own (a new log: `o200k_base`).
    pub encoding: Option<Encoding>,
    pub durability: Durability,
    pub lock_timeout: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            create: false,
            readonly: false,
            encoding: None,
            durability: Durability::Batch,
            lock_timeout: Duration::ZERO,
        }
    }
}

/// Per-append overrides of what the message itself says.
#[derive(Clone, Debug, Default)]
pub struct AppendOptions {
    pub tags: Option<u8>,
    pub weight: Option<f64>,
    pub pinned: bool,
    pub priority: Option<f64>,
    /// `None`: the active head.
    pub parent: Option<u64>,
    pub timestamp: Option<f64>,
}

/// Where the active branch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    head: u64,
    /// The newest summary node on the active path, and the last seq it covers.
    summary: u64,
    summary_last: u64,
}

impl Position {
    const EMPTY: Self = Self {
        head: NONE,
        summary: NONE,
        summary_last: NONE,
    };
}

/// The writer lock, known to the fork handler while held (fields drop in
/// order: the slot is cleared before the descriptor closes).
struct WriterLock {
    _slot: fork::LockSlot,
    _file: std::fs::File,
}

/// Nodes built for a batch, not yet written ([`MessageLog::prepare_batch`]).
pub struct PreparedBatch {
    first: u64,
    head: u64,
    nodes: Vec<BuiltNode>,
}

/// A node and its JSON payload, ready to write.
type BuiltNode = (Node, Vec<u8>);

pub struct MessageLog {
    dir: PathBuf,
    index: Arc<LogFile>,
    data: Arc<LogFile>,
    /// Held for as long as the log is open for writing.
    lock: Option<WriterLock>,
    map: Mapped,
    count: u64,
    data_end: u64,
    index_len: u64,
    data_len: u64,
    position: Position,
    log_id: u64,
    /// Counts each appended message once, into its header: no count cache.
    tokenizer: Tokenizer,
    durability: Durability,
    syncer: Option<Syncer>,
    readonly: bool,
    closed: bool,
    /// The process that opened the log (only it may write).
    origin: fork::Origin,
    decay_powers: window::DecayPowers,
    tag_decay_powers: window::DecayPowers,
    /// Leading records that form one chain (see `extend_linear`).
    linear_len: u64,
    /// Leading records checked whole (see `ensure_checked`).
    checked: u64,
    /// Kept between turns: a million units' keys and starts are 20 MB not
    /// to fault in again.
    scratch_keys: Vec<u128>,
    scratch_starts: Vec<u32>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn finite_f32(value: Option<f64>, default: f32) -> f32 {
    value.map_or(default, |v| v as f32)
}

impl MessageLog {
    pub fn open(dir: &Path, options: &OpenOptions) -> Result<Self> {
        files::ensure_dir(dir, options.create && !options.readonly)?;
        let lock = if options.readonly {
            None
        } else {
            let file = files::lock_writer(dir, options.lock_timeout)?;
            Some(WriterLock {
                _slot: fork::LockSlot::hold(&file),
                _file: file,
            })
        };
        let write = !options.readonly;
        let fresh = write && !dir.join("index").exists();
        if fresh && !options.create {
            return Err(Error::LogNotFound {
                path: dir.display().to_string(),
            });
        }
        let index = LogFile::open(dir, "index", write, fresh)?;
        let data = LogFile::open(dir, "data", write, fresh)?;
        let encoding = if fresh {
            let encoding = options.encoding.unwrap_or(Encoding::O200kBase);
            create_files(dir, &index, &data, encoding)?;
            encoding
        } else {
            Encoding::ALL[0] // replaced below from the index header
        };
        let mut log = Self {
            dir: dir.to_owned(),
            index: Arc::new(index),
            data: Arc::new(data),
            lock,
            map: Mapped::empty(),
            count: 0,
            data_end: FILE_HEADER_LEN as u64,
            index_len: 0,
            data_len: 0,
            position: Position::EMPTY,
            log_id: 0,
            tokenizer: Tokenizer::new(encoding).uncached(),
            durability: options.durability,
            syncer: None,
            readonly: options.readonly,
            closed: false,
            origin: fork::Origin::here(),
            decay_powers: window::DecayPowers::default(),
            tag_decay_powers: window::DecayPowers::default(),
            linear_len: 0,
            checked: 0,
            scratch_keys: Vec::new(),
            scratch_starts: Vec::new(),
        };
        let stored = log.read_file_headers()?;
        if let Some(wanted) = options.encoding.filter(|e| *e != stored) {
            return Err(Error::InvalidValue {
                path: "encoding".into(),
                reason: format!(
                    "this log counts tokens in {}, not {}",
                    stored.name(),
                    wanted.name()
                ),
            });
        }
        log.tokenizer = Tokenizer::new(stored).uncached();
        log.load()?;
        if !log.readonly && log.durability == Durability::Batch {
            log.syncer = Some(Syncer::start(
                Arc::clone(&log.data),
                Arc::clone(&log.index),
                BATCH_WINDOW,
            ));
        }
        Ok(log)
    }

    /// Check the index and data headers; the encoding of the counts.
    fn read_file_headers(&mut self) -> Result<Encoding> {
        let mut bytes = [0u8; FILE_HEADER_LEN];
        let got = self.index.read_at_most(&mut bytes, 0)?;
        let index = FileHeader::decode(&bytes[..got], INDEX_MAGIC, &self.index.name())?;
        let got = self.data.read_at_most(&mut bytes, 0)?;
        let data = FileHeader::decode(&bytes[..got], DATA_MAGIC, &self.data.name())?;
        if index.log_id != data.log_id {
            return Err(Error::LogCorrupt {
                file: self.data.name(),
                offset: 16,
                reason: "belongs to another log (log ids differ)".into(),
            });
        }
        self.log_id = index.log_id;
        Encoding::from_name(&index.encoding).map_err(|_| Error::LogCorrupt {
            file: self.index.name(),
            offset: 24,
            reason: format!("unknown encoding {:?}", index.encoding),
        })
    }

    /// Find the committed records (settling a torn tail first when writing)
    /// and the head.
    fn load(&mut self) -> Result<()> {
        self.index_len = self.index.len()?;
        self.data_len = self.data.len()?;
        self.remap()?;
        let checkpoint = self.read_checkpoint().filter(|c| self.checkpoint_fits(c));
        let start = checkpoint.map_or(0, |c| c.count);
        self.count = start;
        self.data_end = self.frame_end_before(self.count)?;
        self.scan_new_records()?;
        if self.readonly {
            self.look_past_the_end()?;
        } else {
            let tail = recover::examine(self, recover::Mode::Settle)?;
            if let Some(damage) = tail.stranded {
                return Err(damage);
            }
            self.count = tail.count;
        }
        self.data_end = self.frame_end_before(self.count)?;
        let (mut position, replay_from) = match checkpoint {
            Some(c) if c.count <= self.count => (
                Position {
                    head: c.head,
                    summary: c.summary,
                    summary_last: c.summary_last,
                },
                c.count,
            ),
            _ => (Position::EMPTY, 0),
        };
        for seq in replay_from..self.count {
            position = self.advance(position, &self.node(seq)?)?;
        }
        self.position = position;
        if !self.readonly && self.count != start {
            self.write_checkpoint()?;
        }
        Ok(())
    }

    /// A reader stops at the first invalid slot, as it must while a writer
    /// appends; but intact records past it, with no writer to blame, are
    /// damage it must not hide. Confirmed under a shared hold of the lock, so
    /// no writer starts meanwhile.
    fn look_past_the_end(&mut self) -> Result<()> {
        if recover::examine(self, recover::Mode::Look)?
            .stranded
            .is_none()
        {
            return Ok(());
        }
        let Some(_hold) = files::hold_if_no_writer(&self.dir)? else {
            return Ok(()); // a writer is appending: what follows is in flight
        };
        // What a writer committed (and closed) since: the index may have
        // grown past the map.
        let index_len = self.index.len()?;
        self.catch_up(index_len)?;
        match recover::examine(self, recover::Mode::Look)?.stranded {
            Some(damage) => Err(damage),
            None => Ok(()),
        }
    }

    /// Whether a checkpoint can describe these files; a stale or crafted
    /// one is only a cache miss (every record is replayed).
    fn checkpoint_fits(&self, c: &Checkpoint) -> bool {
        let node = |seq: u64| {
            (seq < c.count && seq < self.slots())
                .then(|| Node::decode(self.slot_bytes(seq), seq))
                .flatten()
        };
        let Some(last) = c.count.checked_sub(1) else {
            return c.head == NONE && c.summary == NONE && c.data_end == FILE_HEADER_LEN as u64;
        };
        let Some(last) = node(last) else {
            return false;
        };
        let head_fits = node(c.head).is_some_and(|n| n.kind != KIND_BRANCH && n.kind != KIND_LOST);
        let summary_fits =
            c.summary == NONE || node(c.summary).is_some_and(|n| n.kind == KIND_SUMMARY);
        last.frame_end() == c.data_end && head_fits && summary_fits
    }

    fn read_checkpoint(&self) -> Option<Checkpoint> {
        let meta = LogFile::open(&self.dir, "meta", false, false).ok()?;
        let mut bytes = [0u8; FILE_HEADER_LEN + 64];
        let got = meta.read_at_most(&mut bytes, 0).ok()?;
        let header = FileHeader::decode(&bytes[..got], META_MAGIC, "meta").ok()?;
        if header.log_id != self.log_id {
            return None;
        }
        Checkpoint::decode(&bytes[FILE_HEADER_LEN..got])
    }

    fn write_checkpoint(&self) -> Result<()> {
        let header = FileHeader {
            magic: *META_MAGIC,
            record_len: 0,
            log_id: self.log_id,
            encoding: String::new(),
        };
        let checkpoint = Checkpoint {
            count: self.count,
            head: self.position.head,
            summary: self.position.summary,
            summary_last: self.position.summary_last,
            data_end: self.data_end,
        };
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&checkpoint.encode());
        files::replace_file(
            &self.dir,
            "meta",
            &bytes,
            self.durability != Durability::Never,
        )
    }

    /// Index slots the current map covers.
    fn slots(&self) -> u64 {
        self.map.len().saturating_sub(FILE_HEADER_LEN as u64) / RECORD_LEN as u64
    }

    fn slot_bytes(&self, seq: u64) -> &[u8] {
        let at = FILE_HEADER_LEN + seq as usize * RECORD_LEN;
        &self.map.bytes()[at..at + RECORD_LEN]
    }

    /// Extend `count` over records committed since it was last looked at.
    /// Each is checked whole before it counts: a record whose check matches
    /// but whose fields cannot be (a parent that is not earlier, a frame
    /// that does not follow the last one, lengths the format cannot hold) is
    /// damage, refused before any parent link is followed or buffer sized.
    fn scan_new_records(&mut self) -> Result<()> {
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
    fn ensure_checked(&mut self) -> Result<()> {
        let mut expected = self.frame_end_before(self.checked)?;
        while self.checked < self.count {
            expected = self.checked_node(self.checked, expected)?.frame_end();
            self.checked += 1;
        }
        Ok(())
    }

    /// Where the frame of record `seq` must start: the end of the one before.
    fn frame_end_before(&self, seq: u64) -> Result<u64> {
        Ok(match seq {
            0 => FILE_HEADER_LEN as u64,
            n => self.node(n - 1)?.frame_end(),
        })
    }

    /// Record `seq`, valid and well formed, its frame at `expected`.
    fn checked_node(&self, seq: u64, expected: u64) -> Result<Node> {
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
    fn slot_copy(&self, seq: u64) -> Option<[u8; RECORD_LEN]> {
        (seq < self.slots()).then(|| self.slot_bytes(seq).try_into().expect("64 bytes"))
    }

    fn remap(&mut self) -> Result<()> {
        self.map = Mapped::map(self.index.handle()?, self.index_len)
            .map_err(|e| files::storage(&self.index.path, "map", &e))?;
        Ok(())
    }

    /// Before each operation: no file shorter than what is mapped or
    /// indexed (else an error, never a read past the end); for a reader,
    /// the records the writer committed since.
    fn refresh(&mut self) -> Result<()> {
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
    fn catch_up(&mut self, index_len: u64) -> Result<()> {
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
    fn advance(&self, position: Position, node: &Node) -> Result<Position> {
        if node.kind == KIND_BRANCH {
            return self.position_at(node.parent);
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

    /// The position with `head` as the head: the newest summary on its path.
    fn position_at(&self, head: u64) -> Result<Position> {
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
    fn parent_of(&self, node: &Node) -> Result<u64> {
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
    fn summary_covers(&self, node: &Node) -> Result<(u64, u64)> {
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

    fn checked_seq(&self, seq: i64) -> Result<u64> {
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
    fn payload_of(&self, node: &Node) -> Result<Vec<u8>> {
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

    fn verify_records(&self, from: u64) -> Result<()> {
        let mut expected = self.frame_end_before(from)?;
        for seq in from..self.count {
            let node = self.checked_node(seq, expected)?;
            self.payload_of(&node)?;
            expected = node.frame_end();
        }
        Ok(())
    }

    // -- writing ---------------------------------------------------------------

    fn writable(&mut self) -> Result<()> {
        self.refresh()?;
        self.writable_unmapped()
    }

    /// [`MessageLog::writable`] for a write that reads nothing through the
    /// map: the file-length check (a `statx`) waits for the next call that reads.
    fn writable_unmapped(&self) -> Result<()> {
        if self.closed {
            return Err(Error::LogClosed {
                reason: "the message log is closed",
            });
        }
        if self.readonly {
            return Err(Error::LogClosed {
                reason: "the message log is open read-only",
            });
        }
        // A writer inherited across fork() shares the parent's lock and
        // would append from its own idea of the end, over the parent's
        // records: only the process that opened it writes.
        if self.forked() {
            return Err(Error::LogForked {
                opened_by: self.origin.pid(),
                process: std::process::id(),
            });
        }
        Ok(())
    }

    /// Append one message; its seq.
    pub fn append<J: JsonValue>(
        &mut self,
        message: &J,
        options: &AppendOptions,
        tagger: &Tagger,
    ) -> Result<u64> {
        let parent = if let Some(parent) = options.parent {
            self.writable()?;
            self.parent_for(parent)?
        } else {
            self.writable_unmapped()?;
            self.position.head
        };
        let (node, payload) = self.message_node(message, options, tagger, self.count, parent)?;
        self.write_nodes(vec![(node, payload)])?;
        Ok(self.count - 1)
    }

    /// Append messages in order, each the child of the one before; their seqs.
    pub fn append_many<J: JsonValue>(
        &mut self,
        messages: &[J],
        tagger: &Tagger,
    ) -> Result<std::ops::Range<u64>> {
        self.writable()?;
        let first = self.count;
        let head = self.position.head;
        let mut nodes = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            nodes.push(self.batch_node(message, tagger, first, head, i)?);
        }
        self.write_nodes(nodes)?;
        Ok(first..self.count)
    }

    /// The nodes [`MessageLog::append_many`] would write for `messages`, built
    /// on every core when the batch is large: `text_bytes` (the length of its
    /// strings) at least [`PARALLEL_MIN_BYTES`](crate::PARALLEL_MIN_BYTES).
    /// Nothing is written until [`MessageLog::append_prepared`].
    pub fn prepare_batch<J: JsonValue + Sync>(
        &mut self,
        messages: &[J],
        text_bytes: usize,
        tagger: &Tagger,
    ) -> Result<PreparedBatch> {
        self.writable()?;
        let first = self.count;
        let head = self.position.head;
        let this = &*self;
        let indexed: Vec<(usize, &J)> = messages.iter().enumerate().collect();
        let mut built: Vec<Option<Result<BuiltNode>>> = vec![None; messages.len()];
        crate::parallel::map_into(&indexed, &mut built, text_bytes, |&(i, message)| {
            Some(this.batch_node(message, tagger, first, head, i))
        });
        // map_into fills every slot; the first error in order wins, as in a serial run.
        let nodes = built.into_iter().flatten().collect::<Result<Vec<_>>>()?;
        Ok(PreparedBatch { first, head, nodes })
    }

    /// Write a batch from [`MessageLog::prepare_batch`]; its seqs. A batch
    /// prepared before another write is refused: its seqs are taken.
    pub fn append_prepared(&mut self, batch: PreparedBatch) -> Result<std::ops::Range<u64>> {
        self.writable()?;
        if batch.first != self.count || batch.head != self.position.head {
            return Err(Error::InvalidValue {
                path: "batch".into(),
                reason: format!(
                    "prepared for seq {} after node {}, but the log is at seq {} after node {}",
                    batch.first, batch.head, self.count, self.position.head
                ),
            });
        }
        self.write_nodes(batch.nodes)?;
        Ok(batch.first..self.count)
    }

    /// The node of `messages[i]` of a batch appended at `first` after `head`.
    fn batch_node<J: JsonValue>(
        &self,
        message: &J,
        tagger: &Tagger,
        first: u64,
        head: u64,
        i: usize,
    ) -> Result<(Node, Vec<u8>)> {
        let seq = first + i as u64;
        let parent = if i == 0 { head } else { seq - 1 };
        self.message_node(message, &AppendOptions::default(), tagger, seq, parent)
            .map_err(|e| e.within(&format!("messages[{i}]")))
    }

    fn parent_for(&self, parent: u64) -> Result<u64> {
        if parent >= self.count {
            return Err(Error::LogIndex {
                seq: parent as i64,
                len: self.count,
            });
        }
        // A damaged record is reported as such, not as a missing node.
        if self.node(parent)?.kind == KIND_BRANCH {
            return Err(Error::InvalidValue {
                path: "parent".into(),
                reason: format!("node {parent} is a branch marker, not a message or summary"),
            });
        }
        Ok(parent)
    }

    fn message_node<J: JsonValue>(
        &self,
        message: &J,
        options: &AppendOptions,
        tagger: &Tagger,
        seq: u64,
        parent: u64,
    ) -> Result<(Node, Vec<u8>)> {
        let info = analyze_message(message, &self.tokenizer, Some(tagger))?;
        let payload = message.to_compact_exact()?.into_bytes();
        let mut flags = 0;
        for (on, flag) in [
            (options.pinned || info.pinned, FLAG_PINNED),
            (info.calls, FLAG_CALLS),
            (info.results, FLAG_RESULTS),
            (info.has_text, FLAG_HAS_TEXT),
        ] {
            if on {
                flags |= flag;
            }
        }
        let node = Node {
            seq,
            parent,
            timestamp: options.timestamp.or(info.timestamp).unwrap_or_else(now),
            offset: 0,
            stored_len: 0,
            raw_len: 0,
            tokens: u32::try_from(info.tokens).unwrap_or(u32::MAX),
            weight: finite_f32(options.weight.or(info.weight), f32::NAN),
            priority: finite_f32(options.priority.or(Some(info.priority)), 0.0),
            hash: 0,
            role: format::role_byte(info.role),
            kind: KIND_MESSAGE,
            tags: options.tags.unwrap_or(info.tags),
            flags,
        };
        Ok((node, payload))
    }

    /// Add a summary node covering `first..=last`, child of the head.
    pub fn add_summary(
        &mut self,
        text: &str,
        first: u64,
        last: u64,
        level: u8,
        tagger: &Tagger,
    ) -> Result<u64> {
        self.writable()?;
        if !(2..=3).contains(&level) {
            return Err(Error::InvalidValue {
                path: "level".into(),
                reason: format!("{level}: summaries are level 2 (segment) or 3 (global)"),
            });
        }
        if first > last || last >= self.count {
            return Err(Error::InvalidValue {
                path: "covers".into(),
                reason: format!(
                    "({first}, {last}) is not a range of nodes of this log ({} nodes)",
                    self.count
                ),
            });
        }
        let mut payload = String::from("{\"summary\":");
        crate::json::write_json_string(text, &mut payload);
        let _ = write!(payload, ",\"covers\":[{first},{last}],\"level\":{level}}}");
        // Its header facts are those of the message the model sees for it.
        let prefix = if level == 3 {
            SUMMARY_PREFIX
        } else {
            SEGMENT_PREFIX
        };
        let rendered = Json::Object(vec![
            (Json::String("role".into()), Json::String("system".into())),
            (
                Json::String("content".into()),
                Json::String(format!("{prefix}{text}").into()),
            ),
        ]);
        let info = analyze_message(&&rendered, &self.tokenizer, Some(tagger))?;
        let node = Node {
            seq: self.count,
            parent: self.position.head,
            timestamp: now(),
            offset: 0,
            stored_len: 0,
            raw_len: 0,
            tokens: u32::try_from(info.tokens).unwrap_or(u32::MAX),
            weight: f32::NAN,
            priority: 0.0,
            hash: 0,
            role: format::role_byte(info.role),
            kind: KIND_SUMMARY,
            tags: info.tags,
            flags: Node::with_codec_and_level(
                if info.has_text { FLAG_HAS_TEXT } else { 0 },
                CODEC_RAW,
                level,
            ),
        };
        self.write_nodes(vec![(node, payload.into_bytes())])?;
        self.write_checkpoint()?;
        Ok(self.count - 1)
    }

    /// Make `seq` the head: the next append is its child.
    pub fn rewind(&mut self, seq: i64) -> Result<()> {
        self.writable()?;
        let target = self.checked_seq(seq)?;
        if self.node(target)?.kind == KIND_BRANCH {
            return Err(Error::InvalidValue {
                path: "seq".into(),
                reason: format!("node {target} is a branch marker, not a message or summary"),
            });
        }
        let node = Node {
            seq: self.count,
            parent: target,
            timestamp: now(),
            offset: 0,
            stored_len: 0,
            raw_len: 0,
            tokens: 0,
            weight: f32::NAN,
            priority: 0.0,
            hash: 0,
            role: 4,
            kind: KIND_BRANCH,
            tags: 0,
            flags: 0,
        };
        self.write_nodes(vec![(node, Vec::new())])?;
        self.write_checkpoint()
    }

    /// Write frames, then index records (the commit), for `nodes` in order.
    fn write_nodes(&mut self, nodes: Vec<(Node, Vec<u8>)>) -> Result<()> {
        // A stored payload is never longer than the raw one: one allocation,
        // once every node is known to fit.
        let mut most = 0;
        for (node, raw) in &nodes {
            if u32::try_from(raw.len()).is_err() {
                return Err(Error::InvalidValue {
                    path: format!("messages[{}]", node.seq - self.count),
                    reason: format!(
                        "{} bytes of JSON: over the 4 GiB a node can hold",
                        raw.len()
                    ),
                });
            }
            most += FRAME_PREFIX + raw.len() + 8;
        }
        let mut frames = Vec::with_capacity(most);
        let mut records = Vec::with_capacity(nodes.len() * RECORD_LEN);
        let mut offset = self.data_end;
        let mut position = self.position;
        let mut written = Vec::with_capacity(nodes.len());
        for (mut node, raw) in nodes {
            let (stored, codec) = codec::encode(&raw);
            node.offset = offset;
            node.raw_len = raw.len() as u32;
            node.stored_len = stored.len() as u32;
            node.hash = format::crc(&raw);
            node.flags = Node::with_codec_and_level(node.flags, codec, node.level());
            let record = node.encode();
            frames.extend_from_slice(FRAME_MAGIC);
            frames.extend_from_slice(&record);
            frames.extend_from_slice(&stored);
            frames.resize(frames.len().next_multiple_of(8), 0);
            records.extend_from_slice(&record);
            offset = node.frame_end();
            written.push(node);
        }
        let index_at = (FILE_HEADER_LEN + self.count as usize * RECORD_LEN) as u64;
        self.reserve(index_at + records.len() as u64, offset)?;
        let always = self.durability == Durability::Always;
        let committed = self
            .data
            .write_all_at(&frames, self.data_end)
            .and_then(|()| if always { self.data.sync() } else { Ok(()) })
            .and_then(|()| self.index.write_all_at(&records, index_at))
            .and_then(|()| if always { self.index.sync() } else { Ok(()) });
        if let Err(error) = committed {
            // The append failed, so nothing of it may stay for a later open
            // to index or repair to salvage: unwrite it (best effort; the
            // next open's recovery handles what this cannot).
            let _ = self.index.write_all_at(&vec![0u8; records.len()], index_at);
            let _ = self
                .data
                .write_all_at(&vec![0u8; frames.len()], self.data_end);
            return Err(error);
        }
        self.count += written.len() as u64;
        self.data_end = offset;
        for node in &written {
            position = self.advance(position, node)?;
        }
        self.position = position;
        if let Some(syncer) = &self.syncer {
            syncer.mark_dirty();
        }
        Ok(())
    }

    /// Grow the files (in large steps) so `index_end` and `data_end` fit.
    fn reserve(&mut self, index_end: u64, data_end: u64) -> Result<()> {
        if data_end > self.data_len {
            let len = grown_len(self.data_len, data_end, DATA_MIN_STEP);
            self.data.reserve(len)?;
            self.data_len = len;
        }
        if index_end > self.index_len {
            let len = grown_len(self.index_len, index_end, INDEX_MIN_STEP);
            self.index.reserve(len)?;
            self.index_len = len;
            self.remap()?;
        }
        Ok(())
    }

    /// Sync data, then index.
    pub fn flush(&mut self) -> Result<()> {
        self.refresh()?;
        if !self.readonly {
            self.data.sync()?;
            self.index.sync()?;
        }
        Ok(())
    }

    /// Flush, write the checkpoint, release the lock and close the files.
    /// Idempotent. In a child of a fork the parent's writer is left alone:
    /// nothing is written and its sync thread (which the child does not
    /// have) is not waited for.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let forked = self.forked();
        let syncer = self.syncer.take();
        let result = if forked {
            // The thread lives in the parent only: its handle is forgotten,
            // and the files it holds are closed in this process by putting
            // /dev/null in their place.
            if syncer.is_some() {
                for file in [&self.index, &self.data] {
                    if let Ok(handle) = file.handle() {
                        fork::retire(handle);
                    }
                }
            }
            std::mem::forget(syncer);
            Ok(())
        } else {
            if let Some(syncer) = syncer {
                syncer.stop();
            }
            if self.readonly {
                Ok(())
            } else {
                self.data
                    .sync()
                    .and_then(|()| self.index.sync())
                    .and_then(|()| self.write_checkpoint())
            }
        };
        self.closed = true;
        self.map = Mapped::empty();
        // Closing the child's copies of the descriptors leaves the parent's
        // lock held: a flock belongs to the open file, which the parent shares.
        self.lock = None;
        self.index = Arc::new(LogFile::closed(self.index.path.clone()));
        self.data = Arc::new(LogFile::closed(self.data.path.clone()));
        result
    }

    /// Whether this handle was opened by another process: a copy inherited
    /// across `fork()`.
    fn forked(&self) -> bool {
        self.origin.is_elsewhere()
    }

    /// Rebuild a damaged log from its intact frames (takes the writer lock).
    pub fn repair(dir: &Path, lock_timeout: Duration) -> Result<RepairReport> {
        repair::repair(dir, lock_timeout)
    }
}

impl Drop for MessageLog {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// Write the file headers of a new log.
fn create_files(dir: &Path, index: &LogFile, data: &LogFile, encoding: Encoding) -> Result<()> {
    let log_id = {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        xxhash_rust::xxh3::xxh3_64(
            format!("{nanos}:{}:{}", std::process::id(), dir.display()).as_bytes(),
        )
    };
    let header = |magic: &[u8; 8], record_len: u32, encoding: &str| FileHeader {
        magic: *magic,
        record_len,
        log_id,
        encoding: encoding.to_owned(),
    };
    data.write_all_at(&header(DATA_MAGIC, 0, "").encode(), 0)?;
    data.sync()?;
    index.write_all_at(
        &header(INDEX_MAGIC, RECORD_LEN as u32, encoding.name()).encode(),
        0,
    )?;
    index.sync()?;
    files::sync_dir(dir)
}
