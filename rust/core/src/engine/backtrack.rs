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
//! vocabulary) answers them without running the encoder at all.

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
        if piece.len() > self.longest_token {
            return None;
        }
        self.whole
            .find(hash(piece), |&id| self.bpe.token_bytes(id) == piece)
            .copied()
    }

    #[inline]
    pub(crate) fn count_piece(&self, piece: &[u8]) -> usize {
        if self.whole_token(piece).is_some() {
            1
        } else {
            self.bpe.count(piece)
        }
    }

    /// The count of `piece` if it is at most `limit`, else `None`, stopping early.
    #[inline]
    pub(crate) fn count_piece_up_to(&self, piece: &[u8], limit: usize) -> Option<usize> {
        if self.whole_token(piece).is_some() {
            return (limit >= 1).then_some(1);
        }
        self.bpe.count_till_limit(piece, limit)
    }

    #[inline]
    pub(crate) fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        match self.whole_token(piece) {
            Some(id) => out.push(id),
            None => out.extend(self.bpe.encode_via_backtracking(piece)),
        }
    }

    pub(crate) fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.bpe.num_tokens()).then(|| self.bpe.token_bytes(id))
    }

    pub(crate) fn num_tokens(&self) -> usize {
        self.bpe.num_tokens()
    }
}

#[inline]
fn hash(bytes: &[u8]) -> u64 {
    FxBuildHasher.hash_one(bytes)
}
