//! `o200k_base` and `cl100k_base` on the `bpe` crate (GitHub's rust-gems).
//!
//! Its backtracking encoder yields exactly tiktoken's tokens in time linear in
//! the piece for these vocabularies, where tiktoken's merge loop is superlinear
//! on long pieces (a megabyte of one letter, CJK without spaces). `bpe-openai`
//! ships both vocabularies pre-built and serialised into the binary, so loading
//! one costs a deserialisation, not a build; each loads on first use only.
//!
//! Most pieces of ordinary text are a single token (" the", "ing", "\n\n"), so a
//! whole-piece lookup comes first: a compact hash table of token ids keyed by
//! their bytes (`hashbrown::HashTable<u32>`, 4 bytes a slot, no copy of the
//! vocabulary) answers them without running the encoder at all. Short pieces
//! of several tokens (base64, identifiers, rare words) take tiktoken's own
//! merge loop on a stack array with the same table for ranks (ids are ranks
//! here): for them the backtracking encoder's two heap allocations a piece
//! cost more than the merging. Only longer pieces go to the encoder.

use super::recent;
use bpe_openai::byte_pair_encoding::BytePairEncoding;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::hash::BuildHasher;

pub(crate) struct Backtrack {
    bpe: &'static BytePairEncoding,
    whole: HashTable<u32>,
    longest_token: usize,
}

impl Backtrack {
    pub(crate) fn new(tokenizer: &'static bpe_openai::Tokenizer) -> Self {
        let bpe = &tokenizer.bpe;
        let ids = 0..bpe.num_tokens() as u32;
        let mut whole = HashTable::with_capacity(ids.len());
        let mut longest_token = 0;
        for id in ids {
            let bytes = bpe.token_bytes(id);
            longest_token = longest_token.max(bytes.len());
            whole.insert_unique(hash(bytes), id, |&other| hash(bpe.token_bytes(other)));
        }
        Self {
            bpe,
            whole,
            longest_token,
        }
    }

    /// The token that is exactly `piece`, if there is one.
    #[inline]
    pub(crate) fn whole_token(&self, piece: &[u8]) -> Option<u32> {
        self.whole_token_hashed(piece, hash(piece))
    }

    #[inline]
    fn whole_token_hashed(&self, piece: &[u8], hash: u64) -> Option<u32> {
        if piece.len() > self.longest_token {
            return None;
        }
        self.whole
            .find(hash, |&id| self.bpe.token_bytes(id) == piece)
            .copied()
    }

    #[inline]
    pub(crate) fn count_piece(&self, piece: &[u8]) -> usize {
        let hash = hash(piece);
        if self.whole_token_hashed(piece, hash).is_some() {
            return 1;
        }
        // The vocabulary's address tells the engines' pieces apart.
        let owner = std::ptr::from_ref(self.bpe) as usize;
        recent::count_of(owner, piece, hash, || {
            if is_small(piece) {
                self.merge_small(piece).parts()
            } else {
                self.bpe.count(piece)
            }
        })
    }

    #[inline]
    pub(crate) fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if let Some(id) = self.whole_token(piece) {
            out.push(id);
        } else if is_small(piece) {
            let merged = self.merge_small(piece);
            for part in merged.bounds[..=merged.parts()].windows(2) {
                let bytes = &piece[usize::from(part[0])..usize::from(part[1])];
                out.push(self.whole_token(bytes).expect("merged parts are tokens"));
            }
        } else {
            out.extend(self.bpe.encode_via_backtracking(piece));
        }
    }

    /// tiktoken's `_byte_pair_merge` on a piece of at most [`SMALL_PIECE`] bytes:
    /// repeatedly merge the adjacent pair whose union is the lowest-ranked
    /// token, leftmost on ties, until no pair is a token.
    fn merge_small(&self, piece: &[u8]) -> SmallMerge {
        debug_assert!(piece.len() <= SMALL_PIECE);
        let n = piece.len();
        let mut merge = SmallMerge {
            bounds: [0; SMALL_PIECE + 1],
            len: n + 1,
        };
        for (i, bound) in merge.bounds.iter_mut().enumerate().take(n + 1) {
            *bound = i as u8;
        }
        // ranks[i]: rank of the union of parts i and i + 1 (u32::MAX: not a token).
        let mut ranks = [u32::MAX; SMALL_PIECE];
        let rank_of = |bounds: &[u8; SMALL_PIECE + 1], len: usize, i: usize| -> u32 {
            if i + 2 < len {
                let bytes = &piece[usize::from(bounds[i])..usize::from(bounds[i + 2])];
                self.whole_token(bytes).unwrap_or(u32::MAX)
            } else {
                u32::MAX
            }
        };
        for (i, rank) in ranks.iter_mut().enumerate().take(n.saturating_sub(1)) {
            *rank = rank_of(&merge.bounds, merge.len, i);
        }
        loop {
            let pairs = merge.len.saturating_sub(2);
            let Some((best, &rank)) = ranks[..pairs]
                .iter()
                .enumerate()
                .min_by_key(|&(i, &rank)| (rank, i))
            else {
                break;
            };
            if rank == u32::MAX {
                break;
            }
            // Drop the boundary between parts `best` and `best + 1`.
            merge.bounds.copy_within(best + 2..merge.len, best + 1);
            ranks.copy_within(best + 1..pairs, best);
            merge.len -= 1;
            ranks[best] = rank_of(&merge.bounds, merge.len, best);
            if best > 0 {
                ranks[best - 1] = rank_of(&merge.bounds, merge.len, best - 1);
            }
        }
        merge
    }

    pub(crate) fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.bpe.num_tokens()).then(|| self.bpe.token_bytes(id))
    }

    pub(crate) fn num_tokens(&self) -> usize {
        self.bpe.num_tokens()
    }

    /// Bytes of the longest token: a piece of `n` bytes has at least
    /// `n / longest_token` tokens.
    pub(crate) fn longest_token(&self) -> usize {
        self.longest_token
    }
}

/// Longest piece [`Backtrack::merge_small`] takes. Its cost grows with the
/// square of the bytes, the encoder's with the tokens, so multi-byte text (CJK:
/// three bytes a character) switches to the encoder sooner; measured on base64,
/// identifiers and Chinese (README, "Benchmarks").
const SMALL_PIECE: usize = 32;
const SMALL_NON_ASCII_PIECE: usize = 16;

#[inline]
fn is_small(piece: &[u8]) -> bool {
    piece.len() <= SMALL_NON_ASCII_PIECE || (piece.len() <= SMALL_PIECE && piece.is_ascii())
}

/// The part boundaries left by [`Backtrack::merge_small`].
struct SmallMerge {
    bounds: [u8; SMALL_PIECE + 1],
    len: usize,
}

impl SmallMerge {
    fn parts(&self) -> usize {
        self.len - 1
    }
}

#[inline]
fn hash(bytes: &[u8]) -> u64 {
    FxBuildHasher.hash_one(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_merge_agrees_with_the_backtracking_encoder() {
        let engine = Backtrack::new(bpe_openai::o200k_base());
        let samples: &[&[u8]] = &[
            b"iVBORw0KGgo",
            b"AAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ",
            b"Supercalifragilistic",
            b" antidisestablishment",
            "ünïcödé".as_bytes(),
            "日本語のテキスト".as_bytes(),
            b"zzzzqqqqxxxx",
            b"ab",
        ];
        for &piece in samples {
            let mut ids = Vec::new();
            engine.encode_piece(piece, &mut ids);
            assert_eq!(ids, engine.bpe.encode_via_backtracking(piece), "{piece:?}");
            assert_eq!(engine.count_piece(piece), ids.len());
        }
    }

    #[test]
    fn remembered_counts_belong_to_their_vocabulary() {
        let o200k = Backtrack::new(bpe_openai::o200k_base());
        let cl100k = Backtrack::new(bpe_openai::cl100k_base());
        let pieces: [&[u8]; 4] = [
            " 支付回调服务".as_bytes(),
            " 已经上线".as_bytes(),
            b" idempotent",
            b" Supercalifragilisticexpialidocious",
        ];
        for _ in 0..3 {
            for engine in [&o200k, &cl100k] {
                for piece in pieces {
                    let exact = engine.bpe.encode_via_backtracking(piece).len();
                    assert_eq!(engine.count_piece(piece), exact, "{piece:?}");
                }
            }
        }
        let differ = |piece: &[u8]| o200k.count_piece(piece) != cl100k.count_piece(piece);
        assert!(
            pieces.iter().any(|p| differ(p)),
            "a piece the vocabularies count apart"
        );
    }
}
