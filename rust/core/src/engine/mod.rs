//! Counting engines: the BPE behind each encoding, loaded once per process on
//! first use (a process that counts with one encoding holds only that one).
//!
//! Engine choice was made by measurement (README, "Benchmarks"): for `o200k_base`
//! and `cl100k_base` the `bpe` crate's backtracking encoder, behind our own
//! pre-tokenizer and a whole-piece lookup, counts 2-10x faster than tiktoken
//! with identical tokens; `p50k_base` and `r50k_base` keep tiktoken's merge.

mod backtrack;
mod merge;
mod recent;

use std::sync::OnceLock;

use crate::cache::CountCache;
use crate::encoding::Encoding;
use crate::pretokenize::Pattern;

enum Kind {
    Backtrack(backtrack::Backtrack),
    Merge(merge::Merge),
}

/// One loaded encoding: its BPE, split pattern, special tokens and count cache.
pub(crate) struct Engine {
    pub(crate) encoding: Encoding,
    pattern: Pattern,
    kind: Kind,
    pub(crate) cache: CountCache,
    /// Counts of [`ROLES`], asked for once a message.
    role_counts: [usize; ROLES.len()],
}

/// The role names chat messages use.
const ROLES: [&str; 6] = [
    "user",
    "assistant",
    "system",
    "tool",
    "developer",
    "function",
];

/// What [`Engine::count_pieces_up_to`] read of a text.
pub(crate) struct CountedPrefix {
    /// `(end in bytes, tokens up to there)` after each piece counted.
    pub(crate) piece_ends: Vec<(usize, usize)>,
    /// Whether the whole text was counted, in at most the limit.
    pub(crate) whole: bool,
}

static ENGINES: [OnceLock<Engine>; 4] = [const { OnceLock::new() }; 4];

/// The process-wide engine for `encoding`, loading it on first use.
pub(crate) fn engine(encoding: Encoding) -> &'static Engine {
    let slot = match encoding {
        Encoding::O200kBase => 0,
        Encoding::Cl100kBase => 1,
        Encoding::P50kBase => 2,
        Encoding::R50kBase => 3,
    };
    ENGINES[slot].get_or_init(|| Engine::load(encoding))
}

impl Engine {
    fn load(encoding: Encoding) -> Self {
        let kind = match encoding {
            Encoding::O200kBase => {
                Kind::Backtrack(backtrack::Backtrack::new(bpe_openai::o200k_base()))
            }
            Encoding::Cl100kBase => {
                Kind::Backtrack(backtrack::Backtrack::new(bpe_openai::cl100k_base()))
            }
            Encoding::P50kBase => {
                let core = tiktoken_rs::p50k_base().expect("embedded p50k_base vocabulary loads");
                Kind::Merge(merge::Merge::new(&core, encoding.special_tokens(), 50_280))
            }
            Encoding::R50kBase => {
                let core = tiktoken_rs::r50k_base().expect("embedded r50k_base vocabulary loads");
                Kind::Merge(merge::Merge::new(&core, encoding.special_tokens(), 50_256))
            }
        };
        let mut engine = Self {
            encoding,
            pattern: encoding.pattern(),
            kind,
            cache: CountCache::default(),
            role_counts: [0; ROLES.len()],
        };
        engine.role_counts = ROLES.map(|role| engine.count(role));
        engine
    }

    /// Token count of a role name: a table lookup for the usual ones.
    pub(crate) fn count_role(&self, role: &str) -> usize {
        match ROLES.iter().position(|r| *r == role) {
            Some(i) => self.role_counts[i],
            None => self.cache.get_or_count(role, |t| self.count(t)),
        }
    }

    /// Token count of `text` (ordinary text: special-token look-alikes are text).
    pub(crate) fn count(&self, text: &str) -> usize {
        let pieces = self.pattern.split(text);
        match &self.kind {
            Kind::Backtrack(bpe) => pieces.map(|p| bpe.count_piece(p.as_bytes())).sum(),
            Kind::Merge(bpe) => pieces.map(|p| bpe.count_piece(p.as_bytes())).sum(),
        }
    }

    /// `min(count(text), limit + 1)`, without counting past the limit.
    ///
    /// Pieces are counted exactly, one by one, until the total passes the limit.
    /// A piece of `n` bytes holds at least `n / longest_token` tokens, so one
    /// that must overflow is refused before any BPE work; a piece that is
    /// counted is at most `remaining * longest_token` bytes, so the work stays
    /// proportional to the limit, however long the text. (The `bpe` crate's
    /// own early stop rests on a safety margin its authors have not proven.)
    pub(crate) fn count_up_to(&self, text: &str, limit: usize) -> usize {
        let over = limit.saturating_add(1);
        let longest_token = match &self.kind {
            Kind::Backtrack(bpe) => bpe.longest_token(),
            Kind::Merge(bpe) => bpe.longest_token(),
        };
        let mut total = 0usize;
        for piece in self.pattern.split(text) {
            let remaining = limit - total;
            if piece.len().div_ceil(longest_token) > remaining {
                return over;
            }
            let n = self.count_piece(piece);
            if n > remaining {
                return over;
            }
            total += n;
        }
        total
    }

    fn count_piece(&self, piece: &str) -> usize {
        match &self.kind {
            Kind::Backtrack(bpe) => bpe.count_piece(piece.as_bytes()),
            Kind::Merge(bpe) => bpe.count_piece(piece.as_bytes()),
        }
    }

    /// `text`'s first pieces, counted one by one until more than `limit`
    /// tokens are held (or the text ends): after each piece its end in bytes
    /// and the tokens so far; `whole` if that is all of the text in at most
    /// `limit` tokens. Counting (not encoding) keeps the per-piece cache's
    /// speed; [`Engine::prefix_bytes`] encodes only the piece a cut falls in.
    pub(crate) fn count_pieces_up_to(&self, text: &str, limit: usize) -> CountedPrefix {
        let mut out = CountedPrefix {
            piece_ends: Vec::new(),
            whole: true,
        };
        let (mut end, mut tokens) = (0, 0);
        for piece in self.pattern.split(text) {
            if tokens > limit {
                out.whole = false;
                break;
            }
            end += piece.len();
            tokens += self.count_piece(piece);
            out.piece_ends.push((end, tokens));
        }
        out.whole &= tokens <= limit;
        out
    }

    /// The bytes of `text` that the first `kept` of its tokens cover, from
    /// the counted pieces (`prefix` must hold more than `kept` tokens).
    pub(crate) fn prefix_bytes(&self, text: &str, prefix: &CountedPrefix, kept: usize) -> usize {
        // The piece the cut falls in: the first whose end is past `kept` tokens.
        let i = prefix
            .piece_ends
            .partition_point(|&(_, tokens)| tokens <= kept);
        let (start, before) = if i == 0 {
            (0, 0)
        } else {
            prefix.piece_ends[i - 1]
        };
        let Some(&(end, _)) = prefix.piece_ends.get(i) else {
            return start;
        };
        let mut ids = Vec::new();
        match &self.kind {
            Kind::Backtrack(bpe) => bpe.encode_piece(&text.as_bytes()[start..end], &mut ids),
            Kind::Merge(bpe) => bpe.encode_piece(&text.as_bytes()[start..end], &mut ids),
        }
        start
            + ids[..kept - before]
                .iter()
                .map(|&id| self.token_bytes(id).map_or(0, <[u8]>::len))
                .sum::<usize>()
    }

    pub(crate) fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 4 + 1);
        for piece in self.pattern.split(text) {
            match &self.kind {
                Kind::Backtrack(bpe) => bpe.encode_piece(piece.as_bytes(), &mut out),
                Kind::Merge(bpe) => bpe.encode_piece(piece.as_bytes(), &mut out),
            }
        }
        out
    }

    /// Bytes of one token id, special tokens included; `None` if the id is unknown.
    pub(crate) fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let ordinary = match &self.kind {
            Kind::Backtrack(bpe) => bpe.token_bytes(id),
            Kind::Merge(bpe) => bpe.token_bytes(id),
        };
        ordinary.or_else(|| {
            self.encoding
                .special_tokens()
                .iter()
                .find(|&&(_, special)| special == id)
                .map(|(text, _)| text.as_bytes())
        })
    }

    /// One past the largest ordinary token id.
    pub(crate) fn num_ordinary_ids(&self) -> usize {
        match &self.kind {
            Kind::Backtrack(bpe) => bpe.num_tokens(),
            Kind::Merge(bpe) => bpe.num_tokens(),
        }
    }
}
