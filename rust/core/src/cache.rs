//! A bounded, thread-safe cache of token counts keyed by a 128-bit content hash.
//!
//! Chat accounting recounts the same history turn after turn; with this cache a
//! recount costs a lookup instead of BPE. Keys are hashes, not texts, so the
//! cache holds no copies of user content: XXH3-128 of the text (~10 GB/s), or
//! for a Python `str` the hash Python already keeps in it plus its length
//! (free after the first turn). `quick_cache` provides the sharded, bounded
//! (S3-FIFO) map.

use xxhash_rust::xxh3::xxh3_128;

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

/// The content hash texts are cached under (also the tag cache's key, so a
/// text counted and tagged in one pass is hashed once). Its top bit is clear:
/// keys with it set come from [`foreign_text_key`].
pub fn text_key(text: &str) -> u128 {
    xxh3_128(text.as_bytes()) & !FOREIGN_KEY_BIT
}

const FOREIGN_KEY_BIT: u128 = 1 << 127;

/// A cache key from a hash the caller's runtime already keeps for a string
/// (Python caches `hash(str)` in the object: free after the first turn),
/// with the string's length. A 64-bit keyed hash and an equal length must
/// both collide for two texts to share a key; the top bit keeps these keys
/// apart from [`text_key`]'s.
pub fn foreign_text_key(hash: u64, len: u64) -> u128 {
    FOREIGN_KEY_BIT | (u128::from(len) << 64) | u128::from(hash)
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
