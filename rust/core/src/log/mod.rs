//! The message log: an append-only store of conversation nodes (messages,
//! summaries, branch markers) with fixed-size headers read through mmap and
//! payloads in a data file; crash-safe, one writer, many readers.
//! `docs/log-format.md` is the byte-level specification.
//!
//! This module holds the log's types and opens, checkpoints and closes it;
//! `read` is the read path (shared by readers in other processes) and
//! `write` the one writer's.

mod capped;
mod choose;
mod codec;
mod fewest;
mod files;
mod fork;
mod format;
mod mapped;
mod plan;
mod read;
mod recover;
mod repair;
mod stable;
mod stand_in;
mod sync;
mod weighed;
mod window;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use files::storage;
pub use fork::Origin;
pub use format::{
    CODEC_LZ4, CODEC_RAW, FLAG_CALLS, FLAG_HAS_TEXT, FLAG_PINNED, FLAG_RESULTS, KIND_BRANCH,
    KIND_LOST, KIND_MESSAGE, KIND_SUMMARY, NONE, Node, RECORD_LEN,
};
pub use plan::{Job as PlannedJob, Plan, PlanOptions};
pub use repair::RepairReport;
pub use window::{PARALLEL_FACTS_FROM, SEGMENTS_KEPT, ViewPart, ViewSeqs, Window};

use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;
use files::LogFile;
use format::{Checkpoint, DATA_MAGIC, FILE_HEADER_LEN, FileHeader, INDEX_MAGIC, META_MAGIC};
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
    /// The encoding the log must count in (`None`: the log's own); a log
    /// this open makes counts in it.
    pub encoding: Option<Encoding>,
    /// The encoding a log this open makes counts in; an existing log keeps
    /// its own. Given with `encoding`, refused. Neither: `o200k_base`.
    pub new_encoding: Option<Encoding>,
    pub durability: Durability,
    pub lock_timeout: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            create: false,
            readonly: false,
            encoding: None,
            new_encoding: None,
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

/// A text appended in a batch leaves its count in the shared count cache
/// from this length: a tool output that long is what selection caps, and a
/// cap needs the whole count again (0.6 ms for 100 KB). Shorter texts cost
/// little to recount, and are most of an imported log: caching them would
/// evict what selection reuses turn after turn. A message appended alone
/// (a live turn's, which the next selection reads at once) and a summary
/// leave all their counts.
pub const LOG_CACHED_BYTES: usize = 4096;

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
    /// Counts each appended message once, into its header; in a batch,
    /// only long texts leave their counts in the shared cache
    /// ([`LOG_CACHED_BYTES`]).
    tokenizer: Tokenizer,
    durability: Durability,
    syncer: Option<Syncer>,
    readonly: bool,
    closed: bool,
    /// The process that opened the log (only it may write).
    origin: fork::Origin,
    decay_powers: window::DecayPowers,
    tag_decay_powers: window::DecayPowers,
    /// The last node's timestamp (NaN for none): a node appended without
    /// one is never stamped earlier (see `default_stamp`). Kept here, not
    /// read through the map, which a plain append does not check first.
    last_stamp: f64,
    /// Leading records that form one chain (see `extend_linear`).
    linear_len: u64,
    /// That chain's newest node on the path: its last record's, or the
    /// node a rewind (its last record) went back to.
    chain_tail: u64,
    /// The seqs among those records that are not on the chain's path,
    /// ascending: branch markers, and the nodes a rewind left behind.
    chain_holes: Vec<u64>,
    /// Leading records checked whole (see `ensure_checked`).
    checked: u64,
    /// Kept between turns: a million units' keys and starts are 20 MB not
    /// to fault in again.
    scratch_keys: Vec<u128>,
    /// The weighted window's facts read ahead on every core, kept between turns.
    scratch_facts: Vec<crate::select::UnitFacts>,
    scratch_starts: Vec<u32>,
    scratch_units: Vec<crate::select::Unit>,
    /// A plain view's units that appends cannot change (see `stable`).
    stable_units: stable::StableUnits,
    /// The other weighing's (see `stable`).
    parked_units: stable::StableUnits,
    /// A plain view's final units by weight class (see `weighed`).
    weighed: weighed::WeighedUnits,
    /// Tool results over a policy's cap, counted as cut (see `capped`).
    capped: capped::CappedCounts,
    /// Counts standing in for records' own in one selection (see `stand_in`).
    stand_ins: Vec<(u64, usize)>,
}

impl MessageLog {
    pub fn open(dir: &Path, options: &OpenOptions) -> Result<Self> {
        if options.encoding.is_some() && options.new_encoding.is_some() {
            return Err(Error::InvalidValue {
                path: "new_encoding".into(),
                reason:
                    "give encoding (the log must count in it) or new_encoding (a log this open \
                         makes counts in it), not both"
                        .into(),
            });
        }
        files::ensure_dir(dir, options.create && !options.readonly)?;
        let lock = if options.readonly {
            None
        } else {
            let file = loop {
                match files::lock_writer(dir, options.lock_timeout) {
                    // Removed while this waited for its writer: made again, as asked.
                    Err(Error::LogNotFound { .. }) if options.create => {
                        files::ensure_dir(dir, true)?;
                    }
                    locked => break locked?,
                }
            };
            Some(WriterLock {
                _slot: fork::LockSlot::hold(&file),
                _file: file,
            })
        };
        let write = !options.readonly;
        let unfinished = files::never_made_whole(dir)?;
        if unfinished && !(write && options.create) {
            return Err(Error::LogNotFound {
                path: dir.display().to_string(),
            });
        }
        let encoding = if unfinished {
            let encoding = options
                .encoding
                .or(options.new_encoding)
                .unwrap_or(Encoding::O200kBase);
            create_files(dir, encoding)?;
            encoding
        } else {
            Encoding::ALL[0] // replaced below from the index header
        };
        let index = LogFile::open(dir, "index", write, false)?;
        let data = LogFile::open(dir, "data", write, false)?;
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
            tokenizer: Tokenizer::new(encoding).cached_from(LOG_CACHED_BYTES),
            durability: options.durability,
            syncer: None,
            readonly: options.readonly,
            closed: false,
            origin: fork::Origin::here(),
            decay_powers: window::DecayPowers::default(),
            tag_decay_powers: window::DecayPowers::default(),
            last_stamp: f64::NAN,
            linear_len: 0,
            chain_tail: NONE,
            chain_holes: Vec::new(),
            checked: 0,
            scratch_keys: Vec::new(),
            scratch_facts: Vec::new(),
            scratch_starts: Vec::new(),
            scratch_units: Vec::new(),
            stable_units: stable::StableUnits::default(),
            parked_units: stable::StableUnits::default(),
            weighed: weighed::WeighedUnits::default(),
            capped: capped::CappedCounts::default(),
            stand_ins: Vec::new(),
        };
        if let Err(error) = log.read_and_load(options.encoding) {
            // Refused: closed as it is, so dropping it writes nothing (a
            // checkpoint of a log never loaded would be a wrong one).
            log.closed = true;
            return Err(error);
        }
        if !log.readonly && log.durability == Durability::Batch {
            log.syncer = Some(Syncer::start(
                Arc::clone(&log.data),
                Arc::clone(&log.index),
                BATCH_WINDOW,
            ));
        }
        Ok(log)
    }

    /// The headers checked (and the encoding, against `wanted`), then the
    /// records found and a torn tail settled.
    fn read_and_load(&mut self, wanted: Option<Encoding>) -> Result<()> {
        let stored = self.read_file_headers()?;
        if let Some(wanted) = wanted.filter(|e| *e != stored) {
            return Err(Error::InvalidValue {
                path: "encoding".into(),
                reason: format!(
                    "this log counts tokens in {}, not {}",
                    stored.name(),
                    wanted.name()
                ),
            });
        }
        self.tokenizer = Tokenizer::new(stored).cached_from(LOG_CACHED_BYTES);
        self.load()
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
        if self.count > 0 {
            self.last_stamp = self.record(self.count - 1).timestamp();
        }
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

/// A new log's two files, each written whole beside its name and renamed
/// in, `data` first: `index` appears last, so a process killed while making
/// them leaves a directory [`files::never_made_whole`] knows, which the
/// next open makes anew (nothing was acknowledged yet).
fn create_files(dir: &Path, encoding: Encoding) -> Result<()> {
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
    let data = header(DATA_MAGIC, 0, "").encode();
    let index = header(INDEX_MAGIC, RECORD_LEN as u32, encoding.name()).encode();
    files::replace_files(dir, &[("data", &data), ("index", &index)], true)
}
