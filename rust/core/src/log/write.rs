//! The write path of the message log: one writer appends nodes (messages,
//! summaries, branch markers), data before index, and syncs them by its
//! durability.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use super::files::grown_len;
use super::format::{FILE_HEADER_LEN, FRAME_MAGIC, FRAME_PREFIX};
use super::{
    AppendOptions, BuiltNode, CODEC_RAW, DATA_MIN_STEP, Durability, FLAG_CALLS, FLAG_HAS_TEXT,
    FLAG_PINNED, FLAG_RESULTS, INDEX_MIN_STEP, KIND_BRANCH, KIND_MESSAGE, KIND_SUMMARY, MessageLog,
    NONE, Node, PreparedBatch, RECORD_LEN, SEGMENT_PREFIX, SUMMARY_PREFIX, codec, format,
};
use crate::error::{Error, Result};
use crate::json::{Json, JsonValue};
use crate::select::analyze_message;
use crate::tags::Tagger;
use crate::tokenizer::Tokenizer;

impl MessageLog {
    pub(super) fn writable(&mut self) -> Result<()> {
        self.refresh()?;
        self.writable_unmapped()
    }

    /// [`MessageLog::writable`] for a write that reads nothing through the
    /// map: the file-length check (a `statx`) waits for the next call that reads.
    pub(super) fn writable_unmapped(&self) -> Result<()> {
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
        let stamp = self.default_stamp();
        // The keywords' own errors, named as such, not as the message's fields.
        if let Some(given) = options.timestamp {
            check_timestamp(given)?;
        }
        header_f32(options.weight, f32::NAN, "weight")?;
        header_f32(options.priority, 0.0, "priority")?;
        // One message at a time is a live turn's: the next selection reads
        // it at once, so all its texts' counts stay in the shared cache.
        let live = self.tokenizer.cached_from(0);
        let (node, payload, _) =
            Self::message_node(message, options, &live, tagger, (self.count, parent, stamp))
                .map_err(|e| e.within("message"))?;
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
        let now = now();
        let mut built = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            built.push(self.batch_node(message, tagger, (first, head, now), i)?);
        }
        let nodes = self.stamp_batch(built);
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
        let now = now();
        let this = &*self;
        let indexed: Vec<(usize, &J)> = messages.iter().enumerate().collect();
        let mut built: Vec<Option<Result<(BuiltNode, bool)>>> = vec![None; messages.len()];
        crate::parallel::map_into(&indexed, &mut built, text_bytes, |&(i, message)| {
            Some(this.batch_node(message, tagger, (first, head, now), i))
        });
        // map_into fills every slot; the first error in order wins, as in a serial run.
        let built = built.into_iter().flatten().collect::<Result<Vec<_>>>()?;
        let nodes = self.stamp_batch(built);
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

    /// The node of `messages[i]` of a batch appended at `first` after `head`,
    /// and whether it has no timestamp of its own (it holds `now` for now:
    /// [`MessageLog::stamp_batch`] settles it, in order).
    pub(super) fn batch_node<J: JsonValue>(
        &self,
        message: &J,
        tagger: &Tagger,
        (first, head, now): (u64, u64, f64),
        i: usize,
    ) -> Result<(BuiltNode, bool)> {
        let seq = first + i as u64;
        let parent = if i == 0 { head } else { seq - 1 };
        Self::message_node(
            message,
            &AppendOptions::default(),
            &self.tokenizer,
            tagger,
            (seq, parent, now),
        )
        .map(|(node, payload, stamped)| ((node, payload), stamped))
        .map_err(|e| e.within(&format!("messages[{i}]")))
    }

    /// A batch's nodes with no timestamp of their own stamped as appended
    /// one by one at the batch's time: never before the node ahead of them.
    /// One clock reading for the whole batch, so nodes built on several
    /// threads do not go back and forth.
    fn stamp_batch(&self, built: Vec<(BuiltNode, bool)>) -> Vec<BuiltNode> {
        let mut before = self.last_stamp;
        built
            .into_iter()
            .map(|((mut node, payload), stamped)| {
                if stamped {
                    node.timestamp = not_before(node.timestamp, before);
                }
                before = node.timestamp;
                (node, payload)
            })
            .collect()
    }

    pub(super) fn parent_for(&self, parent: u64) -> Result<u64> {
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

    /// The node of `message` at `seq` after `parent`, stamped `stamp` if it
    /// has no time of its own, counted by `tokenizer`.
    pub(super) fn message_node<J: JsonValue>(
        message: &J,
        options: &AppendOptions,
        tokenizer: &Tokenizer,
        tagger: &Tagger,
        (seq, parent, stamp): (u64, u64, f64),
    ) -> Result<(Node, Vec<u8>, bool)> {
        check_role(message)?;
        let info = analyze_message(message, tokenizer, Some(tagger))?;
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
        let given = options.timestamp.or(info.timestamp);
        let timestamp = given.unwrap_or(stamp);
        // Ages come from it, and every later default stamp is never before
        // it: one time in milliseconds (1.7e12) or an infinite one would put
        // the rest of the log in the far future. A default stamp is not
        // checked: it follows the last node's, which a log written before
        // this check may hold out of range.
        if given.is_some() {
            check_timestamp(timestamp)?;
        }
        let node = Node {
            seq,
            parent,
            timestamp,
            offset: 0,
            stored_len: 0,
            raw_len: 0,
            tokens: u32::try_from(info.tokens).unwrap_or(u32::MAX),
            weight: header_f32(options.weight.or(info.weight), f32::NAN, "weight")?,
            priority: header_f32(options.priority.or(Some(info.priority)), 0.0, "priority")?,
            hash: 0,
            role: format::role_byte(info.role),
            kind: KIND_MESSAGE,
            tags: options.tags.unwrap_or(info.tags),
            flags,
        };
        Ok((node, payload, given.is_none()))
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
        // Read by the next selection, as a live append is.
        let info = analyze_message(&&rendered, &self.tokenizer.cached_from(0), Some(tagger))?;
        let node = Node {
            seq: self.count,
            parent: self.position.head,
            timestamp: self.default_stamp(),
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

    /// [`add_summary`](Self::add_summary), only if the log is as a caller
    /// planned it: the newest summary on the active path is still
    /// `expected_summary` (`None`: none) and node `last` is still on the
    /// active path (no rewind took it away). `Ok(None)` if not, and nothing
    /// is written. The check and the append are one step under the log's
    /// lock, so no rewind or summary of another thread falls between them.
    pub fn add_summary_if(
        &mut self,
        text: &str,
        first: u64,
        last: u64,
        level: u8,
        tagger: &Tagger,
        expected_summary: Option<u64>,
    ) -> Result<Option<u64>> {
        self.writable()?;
        if self.position.summary != expected_summary.unwrap_or(NONE) {
            return Ok(None);
        }
        if last >= self.count || self.path_to(None)?.binary_search(&last).is_err() {
            return Ok(None);
        }
        self.add_summary(text, first, last, level, tagger).map(Some)
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
            timestamp: self.default_stamp(),
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
    pub(super) fn write_nodes(&mut self, nodes: Vec<(Node, Vec<u8>)>) -> Result<()> {
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
        if let Some(last) = written.last() {
            self.last_stamp = last.timestamp;
        }
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
    pub(super) fn reserve(&mut self, index_end: u64, data_end: u64) -> Result<()> {
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
}

impl MessageLog {
    /// The timestamp of a node appended without one: the wall clock, but
    /// never before the last node's. A clock stepped back would otherwise
    /// make the log's times go back, and ages from them would no longer
    /// follow the order the messages came in.
    pub(super) fn default_stamp(&self) -> f64 {
        not_before(now(), self.last_stamp)
    }
}

/// `now`, or `before` where that is a later time (a finite one).
fn not_before(now: f64, before: f64) -> f64 {
    if before.is_finite() && now < before {
        before
    } else {
        now
    }
}

/// Seconds since the epoch.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Whether a node may be given `timestamp`: seconds since the epoch, from
/// 0 up to [`MAX_TIMESTAMP`].
fn check_timestamp(timestamp: f64) -> Result<()> {
    if (0.0..MAX_TIMESTAMP).contains(&timestamp) {
        return Ok(());
    }
    Err(Error::InvalidValue {
        path: "timestamp".into(),
        reason: format!(
            "must be seconds since the epoch, from 0 to {MAX_TIMESTAMP:e} (the year 5138), not {}",
            shown(timestamp)
        ),
    })
}

/// A number as an error shows it: in exponent form when far from 1 (not
/// as the hundreds of digits `1e300` or `-5e-324` print to).
fn shown(value: f64) -> String {
    if value == 0.0 || (value.is_finite() && (1e-6..1e15).contains(&value.abs())) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// The latest timestamp a node may have, in seconds since the epoch.
const MAX_TIMESTAMP: f64 = 1e11;

/// The value as the header stores it: one that is not finite, or that f32
/// cannot hold, is refused (as in a message's own fields).
fn header_f32(value: Option<f64>, default: f32, what: &str) -> Result<f32> {
    let Some(value) = value else {
        return Ok(default);
    };
    let stored = value as f32;
    if !stored.is_finite() {
        return Err(Error::InvalidValue {
            path: what.into(),
            reason: format!(
                "must be a finite number within the f32 range, not {}",
                shown(value)
            ),
        });
    }
    Ok(stored)
}

/// The roles a chat message may have, in either provider's format.
pub const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// A message the log keeps must name one of [`ROLES`]: a typo such as
/// `"assitant"` would otherwise be stored and sent, for the API to refuse.
fn check_role<J: JsonValue>(message: &J) -> Result<()> {
    if message.kind() != crate::json::Kind::Object {
        return Ok(()); // the analysis names the wrong type
    }
    let Some(role) = message.get("role") else {
        return Err(Error::MissingField {
            path: "role".into(),
        });
    };
    match role.as_str() {
        Some(name) if ROLES.contains(&name.as_ref()) => Ok(()),
        Some(name) => Err(Error::InvalidValue {
            path: "role".into(),
            reason: format!(
                "unknown role {name:?}; a role is one of {}",
                ROLES.join(", ")
            ),
        }),
        None => Err(Error::WrongType {
            path: "role".into(),
            expected: "a str",
            found: role.type_name().into_owned(),
        }),
    }
}
