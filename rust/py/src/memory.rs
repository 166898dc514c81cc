//! The memory store's hot paths (`context_core::{entities, embed, keywords, vectors}`)
//! for `context_core.memory_store`.

use context_core::ahead::{Ahead, fenced};
use context_core::embed::hash_embed;
use context_core::entities::{entities, entities_many};
use context_core::keywords::{Corpus, KeywordIndex};
use context_core::vectors::{ALL_TAGS, VectorIndex};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::errors::invalid_input;
use crate::text::text as text_of;

/// `(kind, value)` of every entity `text` names, in normal form.
#[pyfunction]
pub fn _entities(py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Vec<(&'static str, String)>> {
    let text = text_of(text, "text")?;
    let found = py.detach(|| entities(&text));
    Ok(found.into_iter().map(|(k, v)| (k.name(), v)).collect())
}

/// [`_entities`] of each text of `texts`, in parallel for a large batch.
#[pyfunction]
pub fn _entities_many(
    py: Python<'_>,
    texts: &Bound<'_, PyList>,
) -> PyResult<Vec<Vec<(&'static str, String)>>> {
    let texts = owned_texts(texts)?;
    let found = py.detach(|| entities_many(&texts));
    Ok(found
        .into_iter()
        .map(|one| one.into_iter().map(|(k, v)| (k.name(), v)).collect())
        .collect())
}

fn owned_texts(texts: &Bound<'_, PyList>) -> PyResult<Vec<String>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| text_of(&t, &format!("texts[{i}]")).map(std::borrow::Cow::into_owned))
        .collect()
}

/// The hashing embeddings of `texts`, `dim` float32 each, row after row, as
/// little-endian bytes (for `numpy.frombuffer`).
#[pyfunction]
pub fn _hash_embed<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyList>,
    dim: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    if dim == 0 {
        return Err(invalid_input("dim must be at least 1"));
    }
    let texts = owned_texts(texts)?;
    let values = py.detach(|| {
        let mut values = vec![0f32; texts.len() * dim];
        for (text, row) in texts.iter().zip(values.chunks_exact_mut(dim)) {
            hash_embed(text, row);
        }
        values
    });
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(PyBytes::new(py, &bytes))
}

fn floats(bytes: &[u8], dim: usize, what: &str) -> PyResult<Vec<f32>> {
    if dim == 0 || !bytes.len().is_multiple_of(4 * dim) {
        return Err(invalid_input(format!(
            "{what} has {} bytes, not whole rows of {dim} float32",
            bytes.len()
        )));
    }
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if values.iter().any(|v| !v.is_finite()) {
        return Err(invalid_input(format!("{what} holds NaN or infinity")));
    }
    Ok(values)
}

/// The rows and how many times they changed: a scan started ahead knows
/// whether the rows it read are still those held.
struct Held {
    index: VectorIndex,
    generation: u64,
}

type Shared = Arc<RwLock<Held>>;

fn read(held: &Shared) -> RwLockReadGuard<'_, Held> {
    held.read().unwrap_or_else(PoisonError::into_inner)
}

fn write(held: &Shared) -> RwLockWriteGuard<'_, Held> {
    held.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A query checked against the rows' width.
fn query_row(query: &[u8], dim: usize) -> PyResult<Vec<f32>> {
    let q = floats(query, dim, "query")?;
    if q.len() != dim {
        return Err(invalid_input("the query is not one row"));
    }
    Ok(q)
}

/// The search `top_k` runs: an int8 scan rescored (with `candidates`), or exact.
fn best(
    index: &VectorIndex,
    query: &[f32],
    k: usize,
    candidates: Option<usize>,
    mask: u8,
    cut: bool,
) -> Vec<(usize, f32)> {
    match candidates {
        Some(c) => index.top_k_quantised_cut(query, k, c, mask, cut),
        None => index.top_k_masked(query, k, mask),
    }
}

/// Rows of one width held in Rust (float32 and an int8 copy), searched by
/// dot product with the interpreter released. Python keeps the row ids.
///
/// The rows are shared with scans started ahead (`top_k_ahead`), which
/// read them on a worker thread: every use takes their lock with the
/// interpreter released (a scan may hold it), inside the fork fence (a
/// child must not inherit it held).
#[pyclass(name = "_VectorIndex", module = "context_core._core", frozen)]
pub struct PyVectorIndex {
    held: Shared,
    dim: usize,
}

impl PyVectorIndex {
    /// `work` on the rows (read), with the interpreter released.
    fn reading<R: Send>(&self, py: Python<'_>, work: impl FnOnce(&Held) -> R + Send) -> R {
        let held = &self.held;
        py.detach(|| fenced(|| work(&read(held))))
    }

    /// `work` on the rows (written), with the interpreter released; every
    /// change counts one more generation.
    fn writing<R: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce(&mut VectorIndex) -> R + Send,
    ) -> R {
        let held = &self.held;
        py.detach(|| {
            fenced(|| {
                let mut held = write(held);
                held.generation += 1;
                work(&mut held.index)
            })
        })
    }
}

#[pymethods]
impl PyVectorIndex {
    #[new]
    fn new(dim: usize) -> PyResult<Self> {
        if dim == 0 {
            return Err(invalid_input("dim must be at least 1"));
        }
        Ok(Self {
            held: Arc::new(RwLock::new(Held {
                index: VectorIndex::new(dim),
                generation: 0,
            })),
            dim,
        })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.reading(py, |held| held.index.len())
    }

    /// Appends whole rows given as float32 bytes, with a tag (0-7) per row
    /// given as bytes (default: all 0).
    #[pyo3(signature = (rows, tags=None))]
    fn extend(&self, py: Python<'_>, rows: &[u8], tags: Option<&[u8]>) -> PyResult<()> {
        let values = floats(rows, self.dim, "rows")?;
        let count = values.len() / self.dim;
        let tags = tags.map_or_else(|| vec![0; count], <[u8]>::to_vec);
        if tags.len() != count || tags.iter().any(|t| *t >= 8) {
            return Err(invalid_input(format!(
                "tags must be {count} bytes, each below 8"
            )));
        }
        // A store's first load of a namespace quantises every row: other
        // threads (a server's event loop) go on meanwhile.
        self.writing(py, |index| index.extend_tagged(&values, &tags));
        Ok(())
    }

    /// Replaces row `index` and its tag.
    #[pyo3(signature = (index, row, tag=0))]
    fn set(&self, py: Python<'_>, index: usize, row: &[u8], tag: u8) -> PyResult<()> {
        let values = floats(row, self.dim, "row")?;
        if tag >= 8 {
            return Err(invalid_input("a tag is below 8"));
        }
        if values.len() != self.dim {
            return Err(invalid_input("the row is not one row"));
        }
        self.writing(py, |rows| {
            // Checked under the lock: another thread may remove rows meanwhile.
            let held = rows.len();
            (index < held)
                .then(|| rows.set_tagged(index, &values, tag))
                .ok_or(held)
        })
        .map_err(|held| invalid_input(format!("no row {index} of {held}")))
    }

    /// Removes row `index`, moving the last row into its place.
    fn swap_remove(&self, py: Python<'_>, index: usize) -> PyResult<()> {
        self.writing(py, |rows| {
            let held = rows.len();
            (index < held).then(|| rows.swap_remove(index)).ok_or(held)
        })
        .map_err(|held| invalid_input(format!("no row {index} of {held}")))
    }

    /// The exact score of each of `rows` for `query`.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts an owned Vec
    fn scores(&self, py: Python<'_>, query: &[u8], rows: Vec<usize>) -> PyResult<Vec<f32>> {
        let q = query_row(query, self.dim)?;
        self.reading(py, |held| {
            let len = held.index.len();
            match rows.iter().find(|&&i| i >= len) {
                Some(&bad) => Err((bad, len)),
                None => Ok(held.index.scores(&q, &rows)),
            }
        })
        .map_err(|(bad, len)| invalid_input(format!("no row {bad} of {len}")))
    }

    /// `(row, score)` of the `k` best rows, best first: exact, or (with
    /// `candidates`) an int8 scan of that many rescored exactly; with
    /// `mask`, only rows whose tag's bit is set; with `cut`, a long sparse
    /// query scanned by its largest terms (see `SCAN_TERMS`).
    #[pyo3(signature = (query, k, candidates=None, mask=None, cut=false))]
    fn top_k(
        &self,
        py: Python<'_>,
        query: &[u8],
        k: usize,
        candidates: Option<usize>,
        mask: Option<u8>,
        cut: bool,
    ) -> PyResult<Vec<(usize, f32)>> {
        let q = query_row(query, self.dim)?;
        let mask = mask.unwrap_or(ALL_TAGS);
        Ok(self.reading(py, |held| best(&held.index, &q, k, candidates, mask, cut)))
    }

    /// [`top_k`](Self::top_k) started on a worker thread: the scan runs
    /// while the caller goes on, and `result()` gives what `top_k` would
    /// have (or `None` if the rows changed meanwhile).
    #[pyo3(signature = (query, k, candidates=None, mask=None, cut=false))]
    fn top_k_ahead(
        &self,
        query: &[u8],
        k: usize,
        candidates: Option<usize>,
        mask: Option<u8>,
        cut: bool,
    ) -> PyResult<PyScanAhead> {
        let q = query_row(query, self.dim)?;
        let held = Arc::clone(&self.held);
        let mask = mask.unwrap_or(ALL_TAGS);
        let ahead = Ahead::start(move || {
            let held = read(&held);
            (
                held.generation,
                best(&held.index, &q, k, candidates, mask, cut),
            )
        });
        Ok(PyScanAhead {
            ahead: Mutex::new(Some(ahead)),
            held: Arc::clone(&self.held),
        })
    }
}

/// What a scan ahead found, and the rows' generation it read.
type Scanned = (u64, Vec<(usize, f32)>);

/// A [`PyVectorIndex::top_k`] running ahead on a worker thread.
#[pyclass(name = "_ScanAhead", module = "context_core._core", frozen)]
pub struct PyScanAhead {
    /// Taken by the first `result()` (a lock held only to take or look).
    ahead: Mutex<Option<Ahead<Scanned>>>,
    held: Shared,
}

#[pymethods]
impl PyScanAhead {
    /// Whether `result()` would return at once.
    #[getter]
    fn ready(&self) -> bool {
        lock(&self.ahead).as_ref().is_none_or(Ahead::is_ready)
    }

    /// What `top_k` gives for the rows held now, waited for (or run here,
    /// if the worker has not begun it); `None` if the rows changed since
    /// the scan read them, if this was already asked, or if the scan was
    /// started in another process (before a fork) or failed: the caller
    /// then runs `top_k` itself.
    fn result(&self, py: Python<'_>) -> Option<Vec<(usize, f32)>> {
        let ahead = lock(&self.ahead).take()?;
        let held = &self.held;
        py.detach(|| {
            let (generation, found) = ahead.wait().ok()?;
            fenced(|| (generation == read(held).generation).then_some(found))
        })
    }
}

/// One namespace's memories as BM25 documents, held in Rust: a keyword
/// query reads no database. Words are given as the store indexes them,
/// each after the namespace's `prefix`.
#[pyclass(name = "_KeywordIndex", module = "context_core._core")]
pub struct PyKeywordIndex {
    inner: KeywordIndex,
    prefix: String,
}

#[pymethods]
impl PyKeywordIndex {
    #[new]
    fn new(prefix: String) -> Self {
        Self {
            inner: KeywordIndex::new(),
            prefix,
        }
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: i64) -> bool {
        self.inner.contains(key)
    }

    /// Words in the held documents (their lengths summed).
    #[getter]
    fn words(&self) -> u64 {
        self.inner.words()
    }

    /// Indexes each of `keys` with its `words` (replacing what it held) and
    /// its tag (0-7, from `tags`, default all 0).
    #[pyo3(signature = (keys, words, tags=None))]
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts owned Vecs
    fn set_many(
        &mut self,
        py: Python<'_>,
        keys: Vec<i64>,
        words: Vec<String>,
        tags: Option<&[u8]>,
    ) -> PyResult<()> {
        let tags = tags.map_or_else(|| vec![0; keys.len()], <[u8]>::to_vec);
        if words.len() != keys.len() || tags.len() != keys.len() || tags.iter().any(|t| *t >= 8) {
            return Err(invalid_input(format!(
                "{} keys need as many words and tags (each below 8), not {} and {}",
                keys.len(),
                words.len(),
                tags.len()
            )));
        }
        let (inner, prefix) = (&mut self.inner, self.prefix.as_str());
        py.detach(|| {
            for ((key, words), tag) in keys.iter().zip(&words).zip(&tags) {
                inner.set(*key, words, prefix, *tag);
            }
        });
        Ok(())
    }

    /// Gives back the room the postings grew into (after a bulk load).
    fn shrink_to_fit(&mut self) {
        self.inner.shrink_to_fit();
    }

    /// Removes `key`; `False` if it was not held.
    fn remove(&mut self, key: i64) -> bool {
        self.inner.remove(key)
    }

    /// How many held documents hold `term`.
    fn holding(&self, term: &str) -> u32 {
        self.inner.holding(term)
    }

    /// The terms a query of `terms` reads (see `top`), rarest first.
    fn chosen(&self, terms: &str, max_terms: usize, max_postings: usize) -> Vec<String> {
        self.inner
            .chosen(terms, max_terms, max_postings)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// `(key, bm25)` of the `limit` best documents for `terms`
    /// (space-separated; the first `max_terms` distinct, the rarest of
    /// those within `max_postings` documents), best first; with `mask`,
    /// only documents whose tag's bit is set. With `corpus`, `(documents,
    /// words, {term: documents holding it})` of all the namespaces a search
    /// reads, BM25 weighs by those.
    #[pyo3(signature = (terms, limit, max_terms, max_postings, mask=None, corpus=None))]
    #[allow(clippy::too_many_arguments)] // the query's bounds, as the store names them
    fn top(
        &self,
        terms: &str,
        limit: usize,
        max_terms: usize,
        max_postings: usize,
        mask: Option<u8>,
        corpus: Option<(u64, u64, HashMap<String, u64>)>,
    ) -> Vec<(i64, f64)> {
        let corpus = corpus.map(|(docs, words, holding)| Corpus {
            docs,
            words,
            holding: holding.into_iter().collect(),
        });
        self.inner.top(
            terms,
            limit,
            max_terms,
            max_postings,
            mask.unwrap_or(ALL_TAGS),
            corpus.as_ref(),
        )
    }
}
