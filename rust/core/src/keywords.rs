//! BM25 keyword search over one namespace's memories, held in memory.
//!
//! Each memory is a document of words (the store's search terms, separated
//! by spaces). A query
//! keeps only its rarest terms, in rising order of how many documents hold
//! them, while those documents add up to at most a bound; it then scores
//! the documents they hold by BM25 (k1 1.2, b 0.75) with the namespace's
//! own document count and average length, so one tenant's memories never
//! move another's scores. The IDF is `ln(1 + (n - held + 0.5) / (held +
//! 0.5))`, as Lucene has it: never below zero, where the classic form is
//! (and must be floored) for a word half a small namespace holds. Reading
//! at most the bound's postings, a query costs the same however many
//! memories share a word, and nothing has to be read from disk.
//!
//! A removed document leaves its postings behind, skipped by the scan,
//! until as many are dead as live: then the postings are rebuilt without
//! them (amortised over the removals that made them).

use std::cmp::Ordering;

use rustc_hash::FxHashMap as HashMap;

/// BM25's term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalisation.
pub const B: f64 = 0.75;
/// Every tag (0-7) of a document.
pub const ALL_TAGS: u8 = 0xff;
/// The dead documents below which the postings are not rebuilt.
const MIN_REBUILD: usize = 1024;

struct Doc {
    key: i64,
    /// Words in the document, indexed or not (BM25's length).
    len: u32,
    tag: u8,
    /// Its distinct terms, to move their counts when it is removed.
    terms: Box<[u32]>,
    live: bool,
}

/// The statistics BM25 weighs by when a search reads several namespaces:
/// theirs together, so each one's scores are on the same scale (a rare
/// word in a small namespace counts as it does in a large one).
pub struct Corpus {
    pub docs: u64,
    pub words: u64,
    /// Documents holding each term, over all of them (0 for one not given).
    pub holding: HashMap<String, u64>,
}

/// The documents of one namespace by key (a memory's rowid).
#[derive(Default)]
pub struct KeywordIndex {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    /// By term: the slots of the documents holding it, and how often each
    /// does (at most 65,535 times counted).
    slots: Vec<Vec<u32>>,
    counts: Vec<Vec<u16>>,
    /// By term: how many live documents hold it.
    holding: Vec<u32>,
    docs: Vec<Doc>,
    slot_of: HashMap<i64, u32>,
    words: u64,
    dead: usize,
}

impl KeywordIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    pub fn contains(&self, key: i64) -> bool {
        self.slot_of.contains_key(&key)
    }

    /// Words in the live documents (their lengths summed).
    pub fn words(&self) -> u64 {
        self.words
    }

    /// Terms held by some document, or by none since the last rebuild.
    pub fn terms(&self) -> usize {
        self.names.len()
    }

    /// Live documents holding `term`.
    pub fn holding(&self, term: &str) -> u32 {
        self.ids
            .get(term)
            .map_or(0, |&id| self.holding[id as usize])
    }

    /// Indexes document `key` (replacing what it held): the words of
    /// `words` (split on spaces) that start with `prefix`, without it.
    /// Every word counts in the document's length; one without the prefix
    /// (another namespace's) matches no query here.
    pub fn set(&mut self, key: i64, words: &str, prefix: &str, tag: u8) {
        self.remove(key);
        let mut len = 0u32;
        let mut ids: Vec<u32> = Vec::new();
        for word in words.split(' ').filter(|w| !w.is_empty()) {
            len = len.saturating_add(1);
            if let Some(term) = word.strip_prefix(prefix).filter(|t| !t.is_empty()) {
                ids.push(self.term_id(term));
            }
        }
        ids.sort_unstable();
        let slot = u32::try_from(self.docs.len()).expect("fewer than 2^32 documents");
        let mut terms: Vec<u32> = Vec::new();
        for run in ids.chunk_by(|a, b| a == b) {
            let at = run[0] as usize;
            self.slots[at].push(slot);
            self.counts[at].push(u16::try_from(run.len()).unwrap_or(u16::MAX));
            self.holding[at] += 1;
            terms.push(run[0]);
        }
        self.docs.push(Doc {
            key,
            len,
            tag,
            terms: terms.into_boxed_slice(),
            live: true,
        });
        self.slot_of.insert(key, slot);
        self.words += u64::from(len);
    }

    fn term_id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 2^32 terms");
        let name: Box<str> = term.into();
        self.ids.insert(name.clone(), id);
        self.names.push(name);
        self.slots.push(Vec::new());
        self.counts.push(Vec::new());
        self.holding.push(0);
        id
    }

    /// Gives back the room the postings grew into (after a bulk load).
    pub fn shrink_to_fit(&mut self) {
        for (slots, counts) in self.slots.iter_mut().zip(self.counts.iter_mut()) {
            slots.shrink_to_fit();
            counts.shrink_to_fit();
        }
        self.docs.shrink_to_fit();
    }

    /// Removes document `key`; `false` if it was not held.
    pub fn remove(&mut self, key: i64) -> bool {
        let Some(slot) = self.slot_of.remove(&key) else {
            return false;
        };
        let doc = &mut self.docs[slot as usize];
        doc.live = false;
        for &id in &doc.terms {
            self.holding[id as usize] -= 1;
        }
        self.words -= u64::from(doc.len);
        self.dead += 1;
        if self.dead >= MIN_REBUILD && self.dead > self.slot_of.len() {
            self.rebuild();
        }
        true
    }

    /// The postings and slots again, without the dead documents, and the
    /// terms no live document holds forgotten (a server that deletes
    /// memories full of ids and dates would otherwise keep every one).
    fn rebuild(&mut self) {
        let mut moved = vec![u32::MAX; self.docs.len()];
        let mut docs = Vec::with_capacity(self.slot_of.len());
        for (old, doc) in std::mem::take(&mut self.docs).into_iter().enumerate() {
            if doc.live {
                moved[old] = u32::try_from(docs.len()).expect("fewer than 2^32 documents");
                docs.push(doc);
            }
        }
        let mut renamed = vec![u32::MAX; self.names.len()];
        let (mut names, mut slots, mut counts, mut holding) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let old_terms = std::mem::take(&mut self.names)
            .into_iter()
            .zip(std::mem::take(&mut self.slots))
            .zip(std::mem::take(&mut self.counts))
            .zip(std::mem::take(&mut self.holding));
        for (old, (((name, old_slots), old_counts), held)) in old_terms.enumerate() {
            if held == 0 {
                continue;
            }
            let mut kept_slots = Vec::with_capacity(held as usize);
            let mut kept_counts = Vec::with_capacity(held as usize);
            for (&slot, &count) in old_slots.iter().zip(&old_counts) {
                let new = moved[slot as usize];
                if new != u32::MAX {
                    kept_slots.push(new);
                    kept_counts.push(count);
                }
            }
            renamed[old] = u32::try_from(names.len()).expect("fewer than 2^32 terms");
            names.push(name);
            slots.push(kept_slots);
            counts.push(kept_counts);
            holding.push(held);
        }
        for doc in &mut docs {
            for id in &mut doc.terms {
                *id = renamed[*id as usize];
            }
        }
        self.ids = names
            .iter()
            .enumerate()
            .map(|(id, name)| (name.clone(), id as u32))
            .collect();
        self.names = names;
        self.slots = slots;
        self.counts = counts;
        self.holding = holding;
        for (slot, doc) in docs.iter().enumerate() {
            self.slot_of.insert(doc.key, slot as u32);
        }
        self.docs = docs;
        self.dead = 0;
    }

    /// The terms a query of `terms` (space-separated, the first `max_terms`
    /// distinct ones) reads: those held by some document, rarest first
    /// (ties by the term), while their documents add up to at most
    /// `max_postings`.
    pub fn chosen<'t>(
        &self,
        terms: &'t str,
        max_terms: usize,
        max_postings: usize,
    ) -> Vec<&'t str> {
        let mut distinct: Vec<&str> = Vec::new();
        for term in terms.split(' ').filter(|t| !t.is_empty()) {
            if distinct.len() == max_terms {
                break;
            }
            if !distinct.contains(&term) {
                distinct.push(term);
            }
        }
        let mut held: Vec<(u32, &str)> = distinct
            .into_iter()
            .map(|term| (self.holding(term), term))
            .filter(|&(docs, _)| docs > 0)
            .collect();
        held.sort_unstable();
        let mut total = 0usize;
        let mut chosen = Vec::new();
        for (docs, term) in held {
            if total + docs as usize > max_postings {
                break;
            }
            total += docs as usize;
            chosen.push(term);
        }
        chosen
    }

    /// `(key, score)` of the `limit` best documents (of the tags whose bit
    /// is set in `mask`) for the query `terms` (see [`Self::chosen`]), best
    /// first (ties: the smaller key). Scores are BM25, higher better, by
    /// this index's statistics or, given, `corpus`'s (which must count
    /// this index's documents among its own).
    pub fn top(
        &self,
        terms: &str,
        limit: usize,
        max_terms: usize,
        max_postings: usize,
        mask: u8,
        corpus: Option<&Corpus>,
    ) -> Vec<(i64, f64)> {
        let chosen = self.chosen(terms, max_terms, max_postings);
        if chosen.is_empty() || limit == 0 {
            return Vec::new();
        }
        // A corpus counts this index's documents too: never fewer.
        let (docs, words) = corpus.map_or((self.len() as u64, self.words), |c| {
            (c.docs.max(self.len() as u64), c.words.max(self.words))
        });
        let docs = docs as f64;
        let average = words as f64 / docs;
        let mut scores: HashMap<u32, f64> = HashMap::default();
        scores.reserve(max_postings.min(4096));
        for term in chosen {
            let id = self.ids[term] as usize;
            let own = u64::from(self.holding[id]);
            let holding =
                corpus.map_or(own, |c| c.holding.get(term).copied().unwrap_or(0).max(own)) as f64;
            let idf = (1.0 + (docs - holding + 0.5) / (holding + 0.5)).ln();
            for (&slot, &count) in self.slots[id].iter().zip(&self.counts[id]) {
                let doc = &self.docs[slot as usize];
                if !doc.live || mask & (1 << doc.tag) == 0 {
                    continue;
                }
                let freq = f64::from(count);
                let length = f64::from(doc.len);
                let part =
                    idf * (freq * (K1 + 1.0)) / (freq + K1 * (1.0 - B + B * length / average));
                *scores.entry(slot).or_insert(0.0) += part;
            }
        }
        let mut found: Vec<(i64, f64)> = scores
            .into_iter()
            .map(|(slot, score)| (self.docs[slot as usize].key, score))
            .collect();
        let order = |a: &(i64, f64), b: &(i64, f64)| {
            b.1.partial_cmp(&a.1)
                .unwrap_or(Ordering::Equal)
                .then(a.0.cmp(&b.0))
        };
        if found.len() > limit {
            found.select_nth_unstable_by(limit - 1, order);
            found.truncate(limit);
        }
        found.sort_unstable_by(order);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(docs: &[(i64, &str)]) -> KeywordIndex {
        let mut index = KeywordIndex::new();
        for &(key, words) in docs {
            index.set(key, words, "", 0);
        }
        index
    }

    #[test]
    fn scores_as_bm25_does() {
        let index = index(&[
            (1, "refund order late"),
            (2, "refund refund"),
            (3, "weather"),
        ]);
        let found = index.top("refund", 10, 32, 1000, ALL_TAGS, None);
        let average = 6.0 / 3.0;
        let idf = (1.0 + (3.0f64 - 2.0 + 0.5) / (2.0 + 0.5)).ln();
        let part = |freq: f64, len: f64| {
            idf * (freq * (K1 + 1.0)) / (freq + K1 * (1.0 - B + B * len / average))
        };
        assert_eq!(found, vec![(2, part(2.0, 2.0)), (1, part(1.0, 3.0))]);
    }

    #[test]
    fn forgets_the_terms_no_document_holds() {
        let mut index = KeywordIndex::new();
        for key in 0..3000 {
            index.set(key, &format!("id{key} shared"), "", 0);
        }
        for key in 1..3000 {
            index.remove(key);
        }
        // id0 and shared, and the ids of those removed since the last
        // rebuild: the rest of 2,999 forgotten.
        assert!(index.dead < MIN_REBUILD);
        assert_eq!(index.terms(), 2 + index.dead);
        assert_eq!(index.holding("shared"), 1);
        assert_eq!(index.top("id0 id5", 5, 32, 1000, ALL_TAGS, None).len(), 1);
    }

    #[test]
    fn scores_by_a_corpus_given() {
        let index = index(&[(1, "refund order"), (2, "weather")]);
        let corpus = Corpus {
            docs: 10,
            words: 30,
            holding: HashMap::from_iter([("refund".to_owned(), 3)]),
        };
        let idf = (1.0 + (10.0f64 - 3.0 + 0.5) / (3.0 + 0.5)).ln();
        let expected = idf * (1.0 * (K1 + 1.0)) / (1.0 + K1 * (1.0 - B + B * 2.0 / 3.0));
        assert_eq!(
            index.top("refund", 5, 32, 1000, ALL_TAGS, Some(&corpus)),
            vec![(1, expected)]
        );
        // A corpus smaller than the index itself counts the index's own.
        let small = Corpus {
            docs: 0,
            words: 0,
            holding: HashMap::default(),
        };
        assert_eq!(
            index.top("refund", 5, 32, 1000, ALL_TAGS, Some(&small)),
            index.top("refund", 5, 32, 1000, ALL_TAGS, None)
        );
    }

    #[test]
    fn keeps_the_rarest_terms_within_the_bound() {
        let index = index(&[(1, "common rare"), (2, "common"), (3, "common")]);
        assert_eq!(index.chosen("common rare", 32, 2), vec!["rare"]);
        assert_eq!(
            index.chosen("common rare missing", 32, 4),
            vec!["rare", "common"]
        );
        assert_eq!(index.chosen("common rare", 1, 4), vec!["common"]);
    }

    #[test]
    fn replaces_removes_and_rebuilds() {
        let mut index = KeywordIndex::new();
        for key in 0..3000 {
            index.set(
                key,
                &format!("nsword{} nsall", key % 7),
                "ns",
                (key % 3) as u8,
            );
        }
        for key in 0..2500 {
            assert!(index.remove(key));
        }
        assert!(!index.remove(1));
        index.set(2999, "nsfresh other", "ns", 1);
        assert_eq!(index.len(), 500);
        assert_eq!(index.holding("all"), 499);
        assert_eq!(index.holding("fresh"), 1);
        assert_eq!(index.holding("other"), 0);
        assert!(index.dead < MIN_REBUILD);
        assert_eq!(index.terms(), 9); // "fresh", "all" and word0-6: the rebuild forgot none held
        let found = index.top("word3", 1000, 32, 1000, 1 << 2, None);
        assert!(
            found
                .iter()
                .all(|&(key, _)| key >= 2500 && key % 7 == 3 && key % 3 == 2)
        );
        assert_eq!(
            found.len(),
            (2500..2999).filter(|k| k % 7 == 3 && k % 3 == 2).count()
        );
    }
}
