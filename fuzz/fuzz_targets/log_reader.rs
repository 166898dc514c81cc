//! The message log's readers on arbitrary files: open (reader and writer),
//! read, walk, select, verify, repair and open again. No input may panic,
//! hang (libFuzzer's -timeout) or allocate more than a small multiple of what
//! the files hold (its -malloc_limit_mb; the files are at most a few hundred
//! KB). A repaired log must always open and verify.
//!
//! Input: a flags byte, then the index, data and meta files, each after a
//! little-endian u32 length (what is left goes to the last file present).
//! Flags ask the harness to make checksums valid after the fuzzer's changes,
//! so crafted files (valid checksums, impossible fields) are explored too:
//! bit 0 file headers, bit 1 frames (payload hash and header check), bit 2
//! index records (their check, and their seq set to the slot), bit 3 copies
//! each frame's header into its slot, bit 4 leaves `meta` out.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use context_core::Json;
use context_core::log::{AppendOptions, MessageLog, OpenOptions};
use context_core::select::{Extras, Weights};
use context_core::tags::{Keywords, Tagger};
use libfuzzer_sys::fuzz_target;

const HEADER: usize = 64;
const RECORD: usize = 64;
const PREFIX: usize = 72;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("context-core-fuzz-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

fn tagger() -> &'static Tagger {
    static TAGGER: OnceLock<Tagger> = OnceLock::new();
    TAGGER.get_or_init(|| Tagger::new(&Keywords::default()).expect("default keywords"))
}

/// The next file of the input: a u32 length, then that many bytes.
fn take<'a>(input: &mut &'a [u8]) -> &'a [u8] {
    if input.len() < 4 {
        return std::mem::take(input);
    }
    let len = u32::from_le_bytes(input[..4].try_into().unwrap()) as usize;
    let rest = &input[4..];
    let (file, after) = rest.split_at(len.min(rest.len()));
    *input = after;
    file
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Make the file header's checksum (and log id, from `id`) valid.
fn fix_file_header(file: &mut [u8], id: Option<[u8; 8]>) {
    if file.len() >= HEADER {
        if let Some(id) = id {
            file[16..24].copy_from_slice(&id);
        }
        let check = crc32fast::hash(&file[..56]);
        put_u32(file, 56, check);
    }
}

fn fix_record(record: &mut [u8]) {
    let check = crc32fast::hash(&record[..60]);
    put_u32(record, 60, check);
}

/// Give every frame (an 8-aligned magic) the hash of its payload, its own
/// offset, and a valid header check; the headers, by seq.
fn fix_frames(data: &mut [u8]) -> Vec<(u64, [u8; RECORD])> {
    let mut headers = Vec::new();
    let mut at = HEADER;
    while at + PREFIX <= data.len() {
        if &data[at..at + 8] != b"CCFRAME1" {
            at += 8;
            continue;
        }
        let stored = (u32_at(data, at + 8 + 32) as usize).min(data.len() - at - PREFIX);
        put_u32(data, at + 8 + 32, stored as u32);
        let codec = (data[at + 8 + 59] >> 4) & 3;
        let payload = &data[at + PREFIX..at + PREFIX + stored];
        let raw = if codec == 1 {
            let raw_len = (u32_at(data, at + 8 + 36) as usize).min(stored * 255);
            lz4_flex::block::decompress(payload, raw_len).unwrap_or_default()
        } else {
            payload.to_vec()
        };
        put_u32(data, at + 8 + 36, raw.len() as u32);
        put_u32(data, at + 8 + 52, crc32fast::hash(&raw));
        data[at + 8 + 24..at + 8 + 32].copy_from_slice(&(at as u64).to_le_bytes());
        fix_record(&mut data[at + 8..at + PREFIX]);
        let header: [u8; RECORD] = data[at + 8..at + PREFIX].try_into().unwrap();
        headers.push((u64::from_le_bytes(header[..8].try_into().unwrap()), header));
        at += (PREFIX + stored).div_ceil(8) * 8;
    }
    headers
}

fn write(name: &str, bytes: Option<&[u8]>) {
    let path = dir().join(name);
    let _ = std::fs::remove_file(&path);
    if let Some(bytes) = bytes {
        std::fs::write(&path, bytes).expect("a scratch file");
    }
}

fn exercise(log: &mut MessageLog) {
    let Ok(len) = log.len() else { return };
    let seqs: Vec<i64> = (0..len.min(2_000) as i64).collect();
    let _ = log.read(&seqs);
    let _ = log.header(-1);
    let _ = log.view();
    let _ = log.path_to(None);
    let _ = log.head();
    let _ = log.last_summary_index();
    // Capped counts as a caller hands them in (any count will do here).
    if let Ok((seqs, from, upto)) = log.over_cap(100) {
        let counts: Vec<(u64, usize)> = seqs.iter().map(|&seq| (seq, 50)).collect();
        log.set_capped(100, from, upto, &counts);
    }
    let extras = Extras {
        global: Some(40),
        memories: vec![10, 20],
        segments: vec![30],
        anchoring: None,
    };
    for budget in [0, 500, usize::MAX / 4] {
        for cap in [None, Some(100), Some(7)] {
            let _ = log.weighted_window(budget, &Weights::default(), 3, 3, None, cap);
            let _ = log.weighted_window(budget, &Weights::default(), 5, 0, Some(1.7e9), cap);
            let _ = log.weighted_window(
                budget,
                &Weights::default(),
                usize::MAX,
                usize::MAX,
                None,
                cap,
            );
            let _ = log.shape_window(budget, 3, 1, Some(25), cap);
            let _ = log.shape_window(budget, usize::MAX, usize::MAX, None, cap);
            let _ = log.priority_window(budget, &extras, cap);
        }
    }
    let _ = log.records();
    let _ = log.verify();
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, mut rest)) = input.split_first() else {
        return;
    };
    let mut index = take(&mut rest).to_vec();
    let mut data = take(&mut rest).to_vec();
    let mut meta = rest.to_vec();
    let id: Option<[u8; 8]> = index.get(16..24).map(|b| b.try_into().unwrap());
    if flags & 2 != 0 {
        let headers = fix_frames(&mut data);
        if flags & 8 != 0 {
            for (seq, header) in headers {
                let at = (seq as usize).saturating_mul(RECORD).saturating_add(HEADER);
                if let Some(slot) = index.get_mut(at..at.saturating_add(RECORD)) {
                    slot.copy_from_slice(&header);
                }
            }
        }
    }
    if flags & 4 != 0 {
        let mut at = HEADER;
        while at + RECORD <= index.len() {
            let slot = ((at - HEADER) / RECORD) as u64;
            if index[at..at + RECORD].iter().any(|&b| b != 0) {
                index[at..at + 8].copy_from_slice(&slot.to_le_bytes());
                fix_record(&mut index[at..at + RECORD]);
            }
            at += RECORD;
        }
    }
    if flags & 1 != 0 {
        fix_file_header(&mut index, None);
        fix_file_header(&mut data, id);
        fix_file_header(&mut meta, id);
        if meta.len() >= 2 * HEADER {
            let check = crc32fast::hash(&meta[HEADER..HEADER + 56]);
            put_u32(&mut meta, HEADER + 56, check);
        }
    }
    write("index", Some(&index));
    write("data", Some(&data));
    write("meta", (flags & 16 == 0).then_some(meta.as_slice()));
    write("meta.tmp", None);

    let reader = OpenOptions {
        readonly: true,
        ..OpenOptions::default()
    };
    if let Ok(mut log) = MessageLog::open(dir(), &reader) {
        exercise(&mut log);
    }
    let writer = OpenOptions {
        lock_timeout: Duration::ZERO,
        ..OpenOptions::default()
    };
    if let Ok(mut log) = MessageLog::open(dir(), &writer) {
        exercise(&mut log);
        let message = Json::Object(vec![
            (Json::String("role".into()), Json::String("user".into())),
            (
                Json::String("content".into()),
                Json::String("after the fuzz".into()),
            ),
        ]);
        let _ = log.append(&&message, &AppendOptions::default(), tagger());
        if let Ok(n) = log.len()
            && n > 0
        {
            let _ = log.add_summary("so far", 0, n - 1, 2, tagger());
            let _ = log.rewind(0);
        }
        let _ = log.close();
    }
    if MessageLog::repair(dir(), Duration::ZERO).is_ok() {
        let mut log = MessageLog::open(dir(), &writer).expect("a repaired log opens");
        log.verify().expect("a repaired log verifies");
        exercise(&mut log);
    }
});
