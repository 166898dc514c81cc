//! `p50k_base` and `r50k_base`: tiktoken's own rank-merge BPE over tiktoken-rs's
//! vocabularies.
//!
//! These legacy vocabularies are not in `bpe-openai`, so they use tiktoken's
//! algorithm: repeatedly merge the adjacent pair of lowest rank (leftmost on
//! ties). Short pieces go through tiktoken-rs's `byte_pair_split`; long ones
//! through the heap-based form below, which makes the same merges in
//! O(n log n) (tiktoken switches to such a form at 100 bytes too, but
//! tiktoken-rs does not export it). The vocabulary is read once out of
//! tiktoken-rs's `CoreBPE`, which is then dropped: we keep one map, not its
//! regex clones and decoder copies.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

/// Pieces of at least this many bytes use the heap-based merge.
const LARGE_PIECE: usize = 100;

pub(crate) struct Merge {
    ranks: FxHashMap<Vec<u8>, u32>,
    longest_token: usize,
    /// Token bytes by rank; `None` for ids that are special or unused.
    by_rank: Vec<Option<Box<[u8]>>>,
}

impl Merge {
    pub(crate) fn new(
        core: &tiktoken_rs::CoreBPE,
        specials: &[(&str, u32)],
        max_rank: u32,
    ) -> Self {
        let mut ranks = FxHashMap::default();
        let mut by_rank = vec![None; max_rank as usize + 1];
        for rank in 0..=max_rank {
            if specials.iter().any(|&(_, id)| id == rank) {
                continue;
            }
            if let Ok(bytes) = core.decode_bytes(&[rank]) {
                by_rank[rank as usize] = Some(bytes.clone().into_boxed_slice());
                ranks.insert(bytes, rank);
            }
        }
        let longest_token = ranks.keys().map(Vec::len).max().unwrap_or(1);
        Self {
            ranks,
            longest_token,
            by_rank,
        }
    }

    #[inline]
    fn rank(&self, bytes: &[u8]) -> Option<u32> {
        self.ranks.get(bytes).copied()
    }

    #[inline]
    pub(crate) fn count_piece(&self, piece: &[u8]) -> usize {
        if self.rank(piece).is_some() {
            1
        } else if piece.len() < LARGE_PIECE {
            tiktoken_rs::byte_pair_split(piece, &self.ranks).len()
        } else {
            self.merge_large(piece).len()
        }
    }

    #[inline]
    pub(crate) fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if let Some(rank) = self.rank(piece) {
            out.push(rank);
        } else if piece.len() < LARGE_PIECE {
            out.extend(
                tiktoken_rs::byte_pair_split(piece, &self.ranks)
                    .into_iter()
                    .map(|part| self.ranks[part]),
            );
        } else {
            out.extend(self.merge_large(piece));
        }
    }

    /// tiktoken's merge with a heap of candidate pairs and lazy invalidation.
    fn merge_large(&self, piece: &[u8]) -> Vec<u32> {
        let n = piece.len();
        // Parts are byte ranges [start, next[start]); `prev` links them back.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        // Rank of merging the part at `start` with the part after it.
        let mut pair_rank: Vec<Option<u32>> = vec![None; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for start in 0..n - 1 {
            pair_rank[start] = self.rank(&piece[start..start + 2]);
            if let Some(rank) = pair_rank[start] {
                heap.push(Reverse((rank, start)));
            }
        }
        while let Some(Reverse((rank, start))) = heap.pop() {
            if pair_rank[start] != Some(rank) {
                continue; // stale: the pair changed since it was pushed
            }
            let absorbed = next[start];
            let end = next[absorbed];
            next[start] = end;
            pair_rank[absorbed] = None;
            if end < n {
                prev[end] = Some(start);
            }
            pair_rank[start] = if end < n {
                self.rank(&piece[start..next[end]])
            } else {
                None
            };
            if let Some(rank) = pair_rank[start] {
                heap.push(Reverse((rank, start)));
            }
            if let Some(before) = prev[start] {
                pair_rank[before] = self.rank(&piece[before..end]);
                if let Some(rank) = pair_rank[before] {
                    heap.push(Reverse((rank, before)));
                }
            }
        }
        let mut tokens = Vec::new();
        let mut start = 0;
        while start < n {
            tokens.push(self.ranks[&piece[start..next[start]]]);
            start = next[start];
        }
        tokens
    }

    pub(crate) fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.by_rank.get(id as usize)?.as_deref()
    }

    pub(crate) fn num_tokens(&self) -> usize {
        self.by_rank.len()
    }

    /// Bytes of the longest token (see `Backtrack::longest_token`).
    pub(crate) fn longest_token(&self) -> usize {
        self.longest_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_merge_equals_tiktoken_merge() {
        let core = tiktoken_rs::r50k_base().unwrap();
        let merge = Merge::new(&core, &[("<|endoftext|>", 50_256)], 50_256);
        let samples = [
            "a".repeat(300),
            "ab".repeat(160),
            "abcabcabd".repeat(40),
            "Supercalifragilisticexpialidocious".repeat(5),
            "ééééàààüüü".repeat(20),
            "日本語のテキスト".repeat(20),
        ];
        for sample in &samples {
            let bytes = sample.as_bytes();
            let expected: Vec<u32> = tiktoken_rs::byte_pair_split(bytes, &merge.ranks)
                .into_iter()
                .map(|part| merge.ranks[part])
                .collect();
            assert_eq!(merge.merge_large(bytes), expected, "{sample}");
        }
    }
}
