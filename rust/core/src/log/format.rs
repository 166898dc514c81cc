//! The bytes of a message log, as `docs/log-format.md` specifies them.

use crate::error::{Error, Result};
use crate::select::Role;

pub const FORMAT_VERSION: u32 = 1;
pub const FILE_HEADER_LEN: usize = 64;
pub const RECORD_LEN: usize = 64;
pub const FRAME_MAGIC: &[u8; 8] = b"CCFRAME1";
/// Frame magic and header copy, before the payload.
pub const FRAME_PREFIX: usize = 8 + RECORD_LEN;
pub const NONE: u64 = u64::MAX;

pub const INDEX_MAGIC: &[u8; 8] = b"CCLOGIDX";
pub const DATA_MAGIC: &[u8; 8] = b"CCLOGDAT";
pub const META_MAGIC: &[u8; 8] = b"CCLOGMET";

pub const KIND_MESSAGE: u8 = 0;
pub const KIND_SUMMARY: u8 = 1;
pub const KIND_BRANCH: u8 = 2;
/// A record `repair` could not salvage (empty payload, parent = the seq before).
pub const KIND_LOST: u8 = 3;

pub const FLAG_PINNED: u8 = 1 << 0;
pub const FLAG_CALLS: u8 = 1 << 1;
pub const FLAG_RESULTS: u8 = 1 << 2;
pub const FLAG_HAS_TEXT: u8 = 1 << 3;
const CODEC_SHIFT: u8 = 4;
const LEVEL_SHIFT: u8 = 6;

/// A message's role as its header stores it, one byte.
pub fn role_byte(role: Role) -> u8 {
    match role {
        Role::System => 0,
        Role::User => 1,
        Role::Assistant => 2,
        Role::Tool => 3,
        Role::Other => 4,
    }
}

/// The role a header's byte names ([`role_byte`] read back; any other byte is `Other`).
pub fn role_of_byte(byte: u8) -> Role {
    match byte {
        0 => Role::System,
        1 => Role::User,
        2 => Role::Assistant,
        3 => Role::Tool,
        _ => Role::Other,
    }
}

pub const CODEC_RAW: u8 = 0;
pub const CODEC_LZ4: u8 = 1;
/// The most bytes an LZ4 block decodes to per byte it holds.
pub const LZ4_MAX_EXPANSION: u64 = 255;

pub fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

pub fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// The 64-byte header at the start of each file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub record_len: u32,
    pub log_id: u64,
    /// The encoding of the token counts (index file only).
    pub encoding: String,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; FILE_HEADER_LEN] {
        let mut out = [0u8; FILE_HEADER_LEN];
        out[0..8].copy_from_slice(&self.magic);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.record_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        let name = self.encoding.as_bytes();
        out[24..24 + name.len().min(16)].copy_from_slice(&name[..name.len().min(16)]);
        let check = crc(&out[0..56]);
        out[56..60].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// Read and check a file header; `file` names the file in errors.
    pub fn decode(bytes: &[u8], magic: &[u8; 8], file: &str) -> Result<Self> {
        let corrupt = |offset: u64, reason: String| Error::LogCorrupt {
            file: file.to_owned(),
            offset,
            reason,
        };
        if bytes.len() < FILE_HEADER_LEN {
            return Err(corrupt(
                0,
                format!("file header cut short ({} of 64 bytes)", bytes.len()),
            ));
        }
        if &bytes[0..8] != magic {
            return Err(corrupt(
                0,
                format!(
                    "wrong magic {:?}, expected {:?}",
                    String::from_utf8_lossy(&bytes[0..8]),
                    String::from_utf8_lossy(magic)
                ),
            ));
        }
        if crc(&bytes[0..56]) != u32_at(bytes, 56) {
            return Err(corrupt(56, "file header checksum does not match".into()));
        }
        let version = u32_at(bytes, 8);
        if version != FORMAT_VERSION {
            return Err(corrupt(
                8,
                format!("format version {version}, this library reads {FORMAT_VERSION}"),
            ));
        }
        let name = &bytes[24..40];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(Self {
            magic: *magic,
            record_len: u32_at(bytes, 12),
            log_id: u64_at(bytes, 16),
            encoding: String::from_utf8_lossy(&name[..end]).into_owned(),
        })
    }
}

/// One node's header: an index record and the start of its data frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    pub seq: u64,
    pub parent: u64,
    pub timestamp: f64,
    pub offset: u64,
    pub stored_len: u32,
    pub raw_len: u32,
    pub tokens: u32,
    pub weight: f32,
    pub priority: f32,
    pub hash: u32,
    pub role: u8,
    pub kind: u8,
    pub tags: u8,
    pub flags: u8,
}

impl Node {
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8..16].copy_from_slice(&self.parent.to_le_bytes());
        out[16..24].copy_from_slice(&self.timestamp.to_le_bytes());
        out[24..32].copy_from_slice(&self.offset.to_le_bytes());
        out[32..36].copy_from_slice(&self.stored_len.to_le_bytes());
        out[36..40].copy_from_slice(&self.raw_len.to_le_bytes());
        out[40..44].copy_from_slice(&self.tokens.to_le_bytes());
        out[44..48].copy_from_slice(&self.weight.to_le_bytes());
        out[48..52].copy_from_slice(&self.priority.to_le_bytes());
        out[52..56].copy_from_slice(&self.hash.to_le_bytes());
        out[56] = self.role;
        out[57] = self.kind;
        out[58] = self.tags;
        out[59] = self.flags;
        let check = crc(&out[0..60]);
        out[60..64].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// The node in `bytes` if it is a valid record for `slot`.
    pub fn decode(bytes: &[u8], slot: u64) -> Option<Self> {
        let bytes: &[u8; RECORD_LEN] = bytes.get(..RECORD_LEN)?.try_into().ok()?;
        if !record_is_valid(bytes, slot) {
            return None;
        }
        let f32_at = |at: usize| f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        Some(Self {
            seq: u64_at(bytes, 0),
            parent: u64_at(bytes, 8),
            timestamp: f64::from_le_bytes(bytes[16..24].try_into().expect("8")),
            offset: u64_at(bytes, 24),
            stored_len: u32_at(bytes, 32),
            raw_len: u32_at(bytes, 36),
            tokens: u32_at(bytes, 40),
            weight: f32_at(44),
            priority: f32_at(48),
            hash: u32_at(bytes, 52),
            role: bytes[56],
            kind: bytes[57],
            tags: bytes[58],
            flags: bytes[59],
        })
    }

    pub fn codec(&self) -> u8 {
        (self.flags >> CODEC_SHIFT) & 0b11
    }

    pub fn level(&self) -> u8 {
        self.flags >> LEVEL_SHIFT
    }

    pub fn with_codec_and_level(flags: u8, codec: u8, level: u8) -> u8 {
        (flags & 0b1111) | (codec << CODEC_SHIFT) | (level << LEVEL_SHIFT)
    }

    /// Bytes this node's frame takes in the data file.
    pub fn frame_len(&self) -> u64 {
        align8(FRAME_PREFIX as u64 + u64::from(self.stored_len))
    }

    pub fn frame_end(&self) -> u64 {
        self.offset.saturating_add(self.frame_len())
    }

    /// What is wrong with a header whose check matches: only a bug or a
    /// crafted file makes one, and every reader must refuse it before it
    /// follows a parent link or sizes a buffer by a length. `offset` is
    /// where the frame must start (the end of the one before), if known.
    pub fn problem(&self, offset: Option<u64>) -> Option<String> {
        let seq = self.seq;
        if self.parent != NONE && self.parent >= seq {
            return Some(format!(
                "node {seq} names parent {}, not an earlier node",
                self.parent
            ));
        }
        if self.kind > KIND_LOST {
            return Some(format!("node {seq} has unknown kind {}", self.kind));
        }
        if self.codec() > CODEC_LZ4 {
            return Some(format!("node {seq} has unknown codec {}", self.codec()));
        }
        let levels: &[u8] = if self.kind == KIND_SUMMARY {
            &[2, 3]
        } else {
            &[0]
        };
        if !levels.contains(&self.level()) {
            return Some(format!(
                "node {seq} has summary level {} for kind {}",
                self.level(),
                self.kind
            ));
        }
        if let Some(expected) = offset.filter(|&o| o != self.offset) {
            return Some(format!(
                "node {seq} has its frame at byte {}, not at {expected}",
                self.offset
            ));
        }
        if self.offset < FILE_HEADER_LEN as u64 || !self.offset.is_multiple_of(8) {
            return Some(format!("node {seq} has its frame at byte {}", self.offset));
        }
        // Frames follow one another from byte 64, each at least 72 bytes: a
        // seq larger than the frames that fit before its own cannot be (and
        // would have repair stand in a placeholder for each seq skipped).
        if seq > (self.offset - FILE_HEADER_LEN as u64) / FRAME_PREFIX as u64 {
            return Some(format!(
                "node {seq} cannot have its frame at byte {}",
                self.offset
            ));
        }
        if self.codec() == CODEC_RAW && self.stored_len != self.raw_len {
            return Some(format!("node {seq} is stored raw but its lengths differ"));
        }
        // An LZ4 block yields at most 255 bytes per byte it holds (each
        // length byte of 255 adds 255): a larger raw_len cannot be true, and
        // would size the buffer it decodes into.
        if u64::from(self.raw_len) > u64::from(self.stored_len) * LZ4_MAX_EXPANSION {
            return Some(format!(
                "node {seq} claims {} bytes from {} stored",
                self.raw_len, self.stored_len
            ));
        }
        None
    }

    /// `f"{round(timestamp * 1e6):x}-{hash:08x}"`.
    pub fn id(&self) -> String {
        let micros = (self.timestamp * 1e6).round_ties_even();
        let micros = if micros.is_finite() && micros >= 0.0 {
            micros as u64
        } else {
            0
        };
        format!("{micros:x}-{:08x}", self.hash)
    }
}

/// Whether `bytes` hold a record for `slot`: its check matches and its seq is the slot.
pub fn record_is_valid(bytes: &[u8; RECORD_LEN], slot: u64) -> bool {
    u64_at(bytes, 0) == slot && crc(&bytes[0..60]) == u32_at(bytes, 60)
}

/// `(first, last)` from a summary payload's `"covers":[first,last]`.
pub fn summary_covers(payload: &[u8]) -> Option<(u64, u64)> {
    // Inside a JSON string a quote is always escaped, so `"covers":[` can
    // only be the key itself.
    let text = std::str::from_utf8(payload).ok()?;
    let start = text.find("\"covers\":[")? + 10;
    let end = start + text[start..].find(']')?;
    let mut parts = text[start..end].split(',').map(|p| p.trim().parse::<u64>());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(first)), Some(Ok(last)), None) => Some((first, last)),
        _ => None,
    }
}

/// Whether an intact frame's payload is what its kind holds: nothing for a
/// branch marker or a lost node, `covers` of earlier nodes for a summary.
/// (What opening a log reads of a payload; a message's is read on demand.)
pub fn payload_fits_kind(node: &Node, raw: &[u8]) -> bool {
    match node.kind {
        KIND_BRANCH | KIND_LOST => raw.is_empty(),
        KIND_SUMMARY => {
            summary_covers(raw).is_some_and(|(first, last)| first <= last && last < node.seq)
        }
        _ => true,
    }
}

/// The checkpoint in the meta file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub count: u64,
    pub head: u64,
    pub summary: u64,
    pub summary_last: u64,
    pub data_end: u64,
}

impl Checkpoint {
    pub fn encode(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[0..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..16].copy_from_slice(&self.head.to_le_bytes());
        out[16..24].copy_from_slice(&self.summary.to_le_bytes());
        out[24..32].copy_from_slice(&self.summary_last.to_le_bytes());
        out[32..40].copy_from_slice(&self.data_end.to_le_bytes());
        let check = crc(&out[0..56]);
        out[56..60].copy_from_slice(&check.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes = bytes.get(..64)?;
        if crc(&bytes[0..56]) != u32_at(bytes, 56) {
            return None;
        }
        Some(Self {
            count: u64_at(bytes, 0),
            head: u64_at(bytes, 8),
            summary: u64_at(bytes, 16),
            summary_last: u64_at(bytes, 24),
            data_end: u64_at(bytes, 32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node {
            seq: 7,
            parent: 6,
            timestamp: 1_700_000_000.25,
            offset: 64,
            stored_len: 10,
            raw_len: 12,
            tokens: 5,
            weight: f32::NAN,
            priority: 0.0,
            hash: 0xdead_beef,
            role: 1,
            kind: KIND_MESSAGE,
            tags: 1,
            flags: Node::with_codec_and_level(FLAG_PINNED, CODEC_LZ4, 0),
        }
    }

    #[test]
    fn a_node_round_trips_and_a_flipped_bit_is_caught() {
        let bytes = node().encode();
        let back = Node::decode(&bytes, 7).expect("valid");
        assert_eq!(back.seq, 7);
        assert_eq!(back.codec(), CODEC_LZ4);
        assert!(back.weight.is_nan());
        assert!(Node::decode(&bytes, 8).is_none(), "wrong slot");
        for i in 0..RECORD_LEN {
            let mut flipped = bytes;
            flipped[i] ^= 0x10;
            assert!(Node::decode(&flipped, 7).is_none(), "byte {i}");
        }
        assert!(
            Node::decode(&[0u8; 64], 0).is_none(),
            "zeros are not a record"
        );
    }

    #[test]
    fn file_headers_name_what_is_wrong() {
        let header = FileHeader {
            magic: *INDEX_MAGIC,
            record_len: 64,
            log_id: 42,
            encoding: "o200k_base".into(),
        };
        let bytes = header.encode();
        assert_eq!(
            FileHeader::decode(&bytes, INDEX_MAGIC, "index").unwrap(),
            header
        );
        let err = FileHeader::decode(&bytes, DATA_MAGIC, "data").unwrap_err();
        assert!(err.to_string().contains("wrong magic"), "{err}");
        let mut flipped = bytes;
        flipped[20] ^= 1;
        let err = FileHeader::decode(&flipped, INDEX_MAGIC, "index").unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[test]
    fn node_ids_are_microseconds_and_hash() {
        assert_eq!(
            node().id(),
            format!("{:x}-deadbeef", 1_700_000_000_250_000u64)
        );
    }
}
