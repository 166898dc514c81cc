//! The public tokenizer: encode, decode, count (exact, bounded, cached, batched)
//! and truncate on a token boundary.

use std::borrow::Cow;

use crate::cache::CacheInfo;
use crate::encoding::Encoding;
use crate::engine::{Engine, engine};
use crate::error::{Error, Result};
use crate::parallel;

/// The placeholder in a truncation marker replaced by the number of dropped tokens.
pub const DROPPED_PLACEHOLDER: &str = "{dropped}";

/// Set apart from the text keys ([`crate::cache::text_key`] of the same
/// data XOR this) so a PDF's page cost and its text's count are two entries.
const PDF_KEY: u128 = 0x7064_665f_7061_6765_735f_636f_7374_0001;

/// A handle on one encoding. Cheap to copy: the loaded vocabulary is shared by
/// every handle in the process.
#[derive(Clone, Copy)]
pub struct Tokenizer {
    engine: &'static Engine,
    /// Texts of at least this many bytes go through the encoding's shared
    /// count cache (`usize::MAX`: none).
    cache_from: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({})", self.encoding().name())
    }
}

impl Tokenizer {
    /// The tokenizer of `encoding`, loading its vocabulary on first use.
    pub fn new(encoding: Encoding) -> Self {
        Self {
            engine: engine(encoding),
            cache_from: 0,
        }
    }

    /// Whether counts go through the shared count cache (see [`Tokenizer::uncached`]).
    pub fn caches(&self) -> bool {
        self.cache_from != usize::MAX
    }

    fn cached_for(&self, text: &str) -> bool {
        text.len() >= self.cache_from
    }

    /// This tokenizer, counting without the shared count cache: for texts
    /// counted once, whose counts would only evict those selection reuses
    /// turn after turn.
    #[must_use]
    pub fn uncached(self) -> Self {
        Self {
            cache_from: usize::MAX,
            ..self
        }
    }

    /// This tokenizer, caching only the counts of texts of at least `bytes`
    /// (and [`MIN_CACHED_BYTES`](crate::MIN_CACHED_BYTES)): a log's batch
    /// appends leave behind the counts of long tool outputs, which
    /// selection needs again to cap them, and few enough not to evict the
    /// rest; a single append (`0`) leaves all of them.
    #[must_use]
    pub fn cached_from(self, bytes: usize) -> Self {
        Self {
            cache_from: bytes,
            ..self
        }
    }

    /// The tokenizer for an OpenAI model name (see [`Encoding::for_model`]).
    pub fn for_model(model: &str) -> Result<Self> {
        Encoding::for_model(model).map(Self::new)
    }

    pub fn encoding(&self) -> Encoding {
        self.engine.encoding
    }

    /// Token ids of `text`, all of it ordinary text (as tiktoken's `encode_ordinary`).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.engine.encode(text)
    }

    /// The bytes the tokens stand for (special tokens decode to their text).
    pub fn decode_bytes(&self, tokens: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(tokens.len() * 4);
        for &token in tokens {
            let bytes = self.engine.token_bytes(token).ok_or(Error::InvalidToken {
                token: u64::from(token),
            })?;
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }

    /// Bytes of one token, or `None` if the id is not in the vocabulary.
    pub fn token_bytes(&self, token: u32) -> Option<&'static [u8]> {
        self.engine.token_bytes(token)
    }

    /// Ordinary tokens `(id, bytes)` in id order, special tokens excluded.
    pub fn vocabulary(&self) -> impl Iterator<Item = (u32, &'static [u8])> {
        let engine = self.engine;
        let specials = engine.encoding.special_tokens();
        (0..engine.num_ordinary_ids() as u32)
            .filter(move |id| !specials.iter().any(|(_, special)| special == id))
            .filter_map(move |id| engine.token_bytes(id).map(|bytes| (id, bytes)))
    }

    /// Exact token count of `text`.
    pub fn count(&self, text: &str) -> usize {
        self.engine.count(text)
    }

    /// `count(text)` if it is at most `limit`, else `limit + 1`; stops counting
    /// as soon as the limit is passed, so a budget check on a huge tool output
    /// costs about `limit` tokens of work, not the whole text.
    pub fn count_up_to(&self, text: &str, limit: usize) -> usize {
        self.engine.count_up_to(text, limit)
    }

    /// `count(text)` through the per-encoding count cache.
    pub fn count_cached(&self, text: &str) -> usize {
        if !self.cached_for(text) {
            return self.engine.count(text);
        }
        self.engine
            .cache
            .get_or_count(text, |t| self.engine.count(t))
    }

    /// The tokens of a PDF given as base64 (or a data URL):
    /// [`crate::document::PDF_PAGE_TOKENS`] a page. Its pages
    /// ([`crate::document::pdf_pages_of`]) go through the count cache under
    /// a key of their own (the same text counted as text keeps its entry),
    /// so a request recounted each turn reads its PDF once. `None` where the
    /// pages are not known.
    pub fn pdf_tokens_cached(&self, data: &str) -> Option<usize> {
        // Cached as 0 for "not known": a PDF whose pages are known has one.
        // Pages, not tokens: a cached count is a u32, which tokens can pass
        // and pages cannot (each takes at least 10 bytes of a file).
        let measure = |d: &str| crate::document::pdf_pages_of(d).unwrap_or(0);
        let pages = if self.cached_for(data) && data.len() >= crate::MIN_CACHED_BYTES {
            let key = crate::cache::text_key(data) ^ PDF_KEY;
            self.engine.cache.get_or_count_keyed(key, data, measure)
        } else {
            measure(data)
        };
        (pages > 0).then(|| pages.saturating_mul(crate::document::PDF_PAGE_TOKENS))
    }

    /// Puts `tokens`, the known count of `text`, in the count cache (as
    /// [`Tokenizer::count_cached`] would after counting it), so the next
    /// count of the same text is a lookup.
    pub fn remember_count(&self, text: &str, tokens: usize) {
        if self.cached_for(text) {
            self.engine.cache.get_or_count(text, |_| tokens);
        }
    }

    /// `count_cached(text)` with its [`text_key`](crate::text_key) already computed.
    pub fn count_keyed(&self, text: &str, key: u128) -> usize {
        if text.len() < crate::MIN_CACHED_BYTES || !self.cached_for(text) {
            return self.engine.count(text);
        }
        self.engine
            .cache
            .get_or_count_keyed(key, text, |t| self.engine.count(t))
    }

    /// `count_cached` of a string value's text, under the value's own
    /// [`JsonValue::text_key`].
    pub fn count_str_value<J: crate::JsonValue>(&self, value: &J, text: &str) -> usize {
        if !self.cached_for(text) {
            return self.engine.count(text);
        }
        match value
            .text_key()
            .filter(|_| text.len() >= crate::MIN_CACHED_BYTES)
        {
            Some(key) => self.count_keyed(text, key),
            None => self.engine.count(text),
        }
    }

    /// Tokens of `parts` joined by blank lines (`"\n\n"`), as sanitize merges
    /// neighbours, from cached counts: the first part's count, then at each
    /// join the count of the previous part's [`join_tail`] with the blank
    /// line and the next part, less the tail's own (`join_tail` says why that
    /// is exact). A merge that grows by a part each turn costs BPE on the new
    /// part only. Each part comes with its cache key if the caller has one.
    /// `None` where a tail cannot be said simply: count the joined text whole.
    ///
    /// [`join_tail`]: crate::pretokenize::join_tail
    pub fn count_joined(&self, parts: &[(&str, Option<u128>)]) -> Option<usize> {
        let ((first, key), rest) = parts.split_first()?;
        let mut total = match key {
            Some(key) => self.count_keyed(first, *key),
            None => self.count_cached(first),
        };
        let mut previous = *first;
        let mut joined = String::new();
        for (part, _) in rest {
            let tail = crate::pretokenize::join_tail(previous)?;
            joined.clear();
            joined.push_str(tail);
            joined.push_str("\n\n");
            joined.push_str(part);
            // count(tail) <= count(previous) <= total, so this never goes below 0.
            total = total + self.count_cached(&joined) - self.count_cached(tail);
            previous = part;
        }
        Some(total)
    }

    /// Tokens of a message's role name.
    pub fn count_role(&self, role: &str) -> usize {
        self.engine.count_role(role)
    }

    /// Counts of many texts, spread over the cores for large batches.
    pub fn count_many(&self, texts: &[&str]) -> Vec<u32> {
        let mut out = vec![0u32; texts.len()];
        let total_bytes = texts.iter().map(|t| t.len()).sum();
        parallel::map_into(texts, &mut out, total_bytes, |text| {
            u32::try_from(self.engine.count(text)).unwrap_or(u32::MAX)
        });
        out
    }

    pub fn cache_info(&self) -> CacheInfo {
        self.engine.cache.info()
    }

    pub fn cache_clear(&self) {
        self.engine.cache.clear();
    }

    pub fn set_cache_capacity(&self, capacity: usize) {
        self.engine.cache.set_capacity(capacity);
    }

    /// `text` cut to at most `max_tokens` tokens on a token boundary, never
    /// inside a UTF-8 sequence, with `marker` (if any) appended inside the cap.
    ///
    /// The contract, which `context_core.reference` implements as well:
    /// a text of at most `max_tokens` tokens is returned unchanged. Otherwise,
    /// with `ids = encode(text)` and `n = len(ids)`, keep `k` tokens: the longest
    /// prefix of `text` whose UTF-8 fits in the bytes of `ids[..k]`, followed by
    /// `marker` with `{dropped}` replaced by `n - k`. `k` starts at
    /// `max_tokens - count(marker for max_tokens)` and, while the result counts
    /// more than `max_tokens` (BPE is not additive across the join), drops by the
    /// excess (at least 1). A marker that cannot fit even with `k = 0` is an error.
    pub fn truncate<'t>(
        &self,
        text: &'t str,
        max_tokens: usize,
        marker: Option<&str>,
    ) -> Result<Cow<'t, str>> {
        self.truncate_with_count(text, max_tokens, marker, || self.count_cached(text))
            .map(|(cut, _)| cut)
    }

    /// [`Tokenizer::truncate`], with `total` giving `count(text)` when it is
    /// needed (only for a text that does not fit), as the caller knows it.
    ///
    /// The work follows `max_tokens`, not the text: only the pieces up to the
    /// cut are counted (and the one the cut falls in encoded), the whole
    /// text's count comes from the cache, and the cut with its marker is
    /// counted as the tokens of the pieces before a [`stable_cut`] (reused)
    /// plus BPE on the few characters after it.
    ///
    /// With the cut comes its own count (`None` for a text that fits as it
    /// is), which the cut's last check already made: a caller need not count
    /// the cut again.
    ///
    /// [`stable_cut`]: crate::pretokenize::stable_cut
    pub fn truncate_with_count<'t>(
        &self,
        text: &'t str,
        max_tokens: usize,
        marker: Option<&str>,
        total: impl FnOnce() -> usize,
    ) -> Result<(Cow<'t, str>, Option<usize>)> {
        let prefix = self.engine.count_pieces_up_to(text, max_tokens);
        if prefix.whole {
            return Ok((Cow::Borrowed(text), None));
        }
        let n = total();
        let marker_for = |kept: usize| -> String {
            marker.map_or_else(String::new, |m| {
                m.replace(DROPPED_PLACEHOLDER, &(n - kept).to_string())
            })
        };
        let mut kept = max_tokens.saturating_sub(self.count(&marker_for(max_tokens)));
        loop {
            let cut = floor_char_boundary(text, self.engine.prefix_bytes(text, &prefix, kept));
            let marker_text = marker_for(kept);
            let tokens = self.count_cut(text, cut, &marker_text, &prefix.piece_ends);
            if tokens <= max_tokens {
                let mut candidate = String::with_capacity(cut + marker_text.len());
                candidate.push_str(&text[..cut]);
                candidate.push_str(&marker_text);
                return Ok((Cow::Owned(candidate), Some(tokens)));
            }
            if kept == 0 {
                return Err(Error::MarkerTooLong {
                    marker_tokens: tokens,
                    max_tokens,
                });
            }
            kept = kept.saturating_sub((tokens - max_tokens).max(1));
        }
    }

    /// `count(text[..cut] + marker)`, reusing the tokens of `text`'s pieces
    /// (`piece_ends`, from the start) before a stable point near the cut.
    fn count_cut(
        &self,
        text: &str,
        cut: usize,
        marker: &str,
        piece_ends: &[(usize, usize)],
    ) -> usize {
        /// How far back a stable point is looked for: past it, counting the
        /// whole cut costs little more than the search.
        const WITHIN: usize = 256;
        let reuse = crate::pretokenize::stable_cut(text, cut, marker.chars().next(), WITHIN)
            .and_then(|at| {
                let i = piece_ends.binary_search_by_key(&at, |&(end, _)| end).ok()?;
                Some((at, piece_ends[i].1))
            });
        let (at, before) = reuse.unwrap_or((0, 0));
        let mut rest = String::with_capacity(cut - at + marker.len());
        rest.push_str(&text[at..cut]);
        rest.push_str(marker);
        before + self.count(&rest)
    }
}

/// The largest char boundary of `text` at or below `index`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut i = index.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_all_encodings() {
        let text = "Hello, wörld! 你好 🎉 <|endoftext|>   \n\n fn x() {}";
        for encoding in Encoding::ALL {
            let tok = Tokenizer::new(encoding);
            let ids = tok.encode(text);
            assert_eq!(ids.len(), tok.count(text));
            assert_eq!(tok.decode_bytes(&ids).unwrap(), text.as_bytes());
        }
    }

    #[test]
    fn an_uncached_tokenizer_counts_alike_and_leaves_the_cache_alone() {
        // p50k: an encoding no other test's cache traffic uses in this way.
        let tok = Tokenizer::new(Encoding::P50kBase);
        let text = "an uncached count of a text long enough for the cache 必须";
        let before = tok.cache_info();
        assert_eq!(tok.uncached().count_cached(text), tok.count(text));
        assert_eq!(
            tok.uncached().count_keyed(text, crate::text_key(text)),
            tok.count(text)
        );
        assert_eq!(tok.cache_info().size, before.size);
        assert_eq!(tok.count_cached(text), tok.count(text));
    }

    #[test]
    fn matches_tiktoken_rs() {
        let text =
            "The quick brown fox's 12345 jumps\r\n over   the lazy dog. 日本語 テキスト ½ ſ'S";
        let pairs: [(Encoding, tiktoken_rs::CoreBPE); 4] = [
            (Encoding::O200kBase, tiktoken_rs::o200k_base().unwrap()),
            (Encoding::Cl100kBase, tiktoken_rs::cl100k_base().unwrap()),
            (Encoding::P50kBase, tiktoken_rs::p50k_base().unwrap()),
            (Encoding::R50kBase, tiktoken_rs::r50k_base().unwrap()),
        ];
        for (encoding, reference) in pairs {
            let tok = Tokenizer::new(encoding);
            for len in [0, 1, 5, 17, 40, text.len()] {
                let sample = &text[..floor_char_boundary(text, len)];
                assert_eq!(
                    tok.encode(sample),
                    reference.encode_ordinary(sample),
                    "{encoding:?} {sample:?}"
                );
            }
        }
    }

    #[test]
    fn special_tokens_are_ordinary_text_but_decode() {
        let tok = Tokenizer::new(Encoding::Cl100kBase);
        assert!(tok.count("<|endoftext|>") > 1);
        assert_eq!(tok.decode_bytes(&[100_257]).unwrap(), b"<|endoftext|>");
        assert_eq!(
            tok.decode_bytes(&[100_261]),
            Err(Error::InvalidToken { token: 100_261 })
        );
    }

    #[test]
    fn count_up_to_stops_at_the_limit() {
        let tok = Tokenizer::new(Encoding::O200kBase);
        let text = "word ".repeat(1000);
        let full = tok.count(&text);
        assert_eq!(tok.count_up_to(&text, full), full);
        assert_eq!(tok.count_up_to(&text, full + 10), full);
        assert_eq!(tok.count_up_to(&text, 10), 11);
        assert_eq!(tok.count_up_to(&text, 0), 1);
        assert_eq!(tok.count_up_to("", 0), 0);
        let one_piece = "a".repeat(100_000);
        assert_eq!(tok.count_up_to(&one_piece, 5), 6);
    }

    #[test]
    fn truncate_fits_and_keeps_char_boundaries() {
        let tok = Tokenizer::new(Encoding::O200kBase);
        let text = "日本語のテキストとEnglish混在。".repeat(50);
        for max in [0, 1, 2, 3, 10, 57] {
            let cut = tok.truncate(&text, max, None).unwrap();
            assert!(tok.count(&cut) <= max);
            assert!(text.starts_with(cut.as_ref()));
            let marked = tok
                .truncate(&text, max + 20, Some("…[truncated {dropped} tokens]"))
                .unwrap();
            assert!(tok.count(&marked) <= max + 20, "{marked}");
            assert!(marked.contains("[truncated "));
        }
        assert_eq!(tok.truncate("short", 5, Some("…")).unwrap(), "short");
        assert!(matches!(
            tok.truncate(&text, 2, Some("[a marker that is longer than two tokens]")),
            Err(Error::MarkerTooLong { .. })
        ));
    }

    #[test]
    fn a_cut_comes_with_its_own_exact_count() {
        let tok = Tokenizer::new(Encoding::O200kBase);
        let texts = [
            "日本語のテキストとEnglish混在。".repeat(40),
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n\n\n   ".repeat(60),
            "word  \t\n".repeat(300) + &"x".repeat(900),
            "ERROR 2026-12-04T10:00:00Z payment ord_123 failed: timeout\n".repeat(80),
        ];
        for text in &texts {
            for max in [12, 40, 157, 600] {
                for marker in [None, Some("…[truncated {dropped} tokens]"), Some("\n\n…")] {
                    let (cut, counted) = tok
                        .truncate_with_count(text, max, marker, || tok.count(text))
                        .unwrap();
                    if tok.count(text) <= max {
                        assert_eq!((cut.as_ref(), counted), (text.as_str(), None));
                    } else {
                        assert_eq!(counted, Some(tok.count(&cut)), "{max} {marker:?}");
                        assert!(counted.unwrap() <= max);
                    }
                }
            }
        }
        let (whole, counted) = tok.truncate_with_count("short", 5, None, || 1).unwrap();
        assert_eq!((whole.as_ref(), counted), ("short", None));
    }

    #[test]
    fn count_many_matches_count() {
        let tok = Tokenizer::new(Encoding::O200kBase);
        let owned: Vec<String> = (0..3000)
            .map(|i| format!("message {i}: {}", "lorem ipsum ".repeat(i % 50)))
            .collect();
        let texts: Vec<&str> = owned.iter().map(String::as_str).collect();
        let counts = tok.count_many(&texts);
        for (text, &n) in texts.iter().zip(&counts) {
            assert_eq!(n as usize, tok.count(text));
        }
    }

    #[test]
    fn cache_answers_repeats() {
        let tok = Tokenizer::new(Encoding::Cl100kBase);
        let text = "a sufficiently long text to be worth caching, repeated";
        let before = tok.cache_info();
        assert_eq!(tok.count_cached(text), tok.count(text));
        assert_eq!(tok.count_cached(text), tok.count(text));
        let after = tok.cache_info();
        assert!(after.hits > before.hits);
    }
}
