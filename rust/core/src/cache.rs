//! A bounded, thread-safe cache of token counts keyed by a 128-bit content hash.
//!
//! Chat accounting recounts the same history turn after turn; with this cache a
//! recount costs a lookup instead of BPE. Keys are hashes, not texts, so the
//! cache holds no copies of user content, and a hit is exact only as long as
//! no two texts share a key. So the key is a keyed 128-bit hash under a key
//! drawn at random per process: without the key, two colliding texts cannot
//! be searched for offline, and by chance two of a million cached texts
//! share one with a probability near 2^-88. An unkeyed hash (XXH3) or
//! Python's own `hash(str)` (fixed under `PYTHONHASHSEED=0`) lets anyone find
//! a colliding pair in minutes, and the second text then gets the first
//! one's count; XXH3 keeps weak pairs even under a random secret.
//!
//! Measured here: `SipHash-1-3` (128-bit) costs ~15-30 ns up to 256 bytes
//! and reads 4-5 GB/s; `HighwayHash` (128-bit, SIMD) costs ~40 ns for any
//! short text and reads ~10 GB/s. So texts under [`LONG_TEXT_BYTES`] take
//! `SipHash`, longer ones `HighwayHash`. The price of a strong key is hashing the text on
//! each lookup instead of reusing the hash Python keeps in a `str`: README's
//! benchmarks give it. `quick_cache` provides the sharded, bounded (S3-FIFO)
//! map.

use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

use highway::{HighwayHash, HighwayHasher, Key};
use siphasher::sip128::{Hasher128, SipHasher13};

/// From this length on a text is keyed with `HighwayHash`, below with `SipHash`.
pub const LONG_TEXT_BYTES: usize = 256;

/// Texts shorter than this are counted directly: BPE on one to three bytes
/// costs about what hashing and a lookup do (~23 ns); from a role name up
/// (`"user"`, ids, tool arguments: 32-60 ns of BPE) the cache is faster.
pub const MIN_CACHED_BYTES: usize = 4;

/// Default number of cached counts per encoding (about 3 MB).
pub const DEFAULT_CAPACITY: usize = 65_536;

/// Statistics reported by `cache_info()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheInfo {
    pub hits: u64,
    pub misses: u64,
    pub size: usize,
    pub capacity: usize,
}

pub struct CountCache {
    map: quick_cache::sync::Cache<u128, u32>,
}

impl Default for CountCache {
    fn default() -> Self {
        Self {
            map: quick_cache::sync::Cache::new(DEFAULT_CAPACITY),
        }
    }
}

/// The per-process keys of [`text_key`]: drawn from the operating system's
/// randomness through the standard library's `RandomState`.
static KEYS: LazyLock<[u64; 4]> = LazyLock::new(|| {
    let random = std::collections::hash_map::RandomState::new();
    [0, 1, 2, 3].map(|i: u64| random.hash_one(0x6b65_7900_u64 + i))
});

/// The key texts are cached under (also the tag cache's key, so a text
/// counted and tagged in one pass is hashed once): a keyed 128-bit hash.
pub fn text_key(text: &str) -> u128 {
    let keys = &*KEYS;
    let bytes = text.as_bytes();
    if bytes.len() < LONG_TEXT_BYTES {
        let mut hasher = SipHasher13::new_with_keys(keys[0], keys[1]);
        hasher.write(bytes);
        return hasher.finish128().as_u128();
    }
    let [low, high] = HighwayHasher::new(Key(*keys)).hash128(bytes);
    u128::from(high) << 64 | u128::from(low)
}

impl CountCache {
    /// The cached count of `text`, computing and storing it with `count` on a miss.
    pub fn get_or_count(&self, text: &str, count: impl FnOnce(&str) -> usize) -> usize {
        if text.len() < MIN_CACHED_BYTES {
            return count(text);
        }
        self.get_or_count_keyed(text_key(text), text, count)
    }

    /// As [`CountCache::get_or_count`], with `key` = [`text_key`]`(text)` already computed.
    pub fn get_or_count_keyed(
        &self,
        key: u128,
        text: &str,
        count: impl FnOnce(&str) -> usize,
    ) -> usize {
        if let Some(n) = self.map.get(&key) {
            return n as usize;
        }
        let n = count(text);
        self.map.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
        n
    }

    pub fn info(&self) -> CacheInfo {
        CacheInfo {
            hits: self.map.hits(),
            misses: self.map.misses(),
            size: self.map.len(),
            capacity: self.map.capacity() as usize,
        }
    }

    pub fn clear(&self) {
        self.map.clear();
    }

    pub fn set_capacity(&self, capacity: usize) {
        self.map.set_capacity(capacity as u64);
    }
}
