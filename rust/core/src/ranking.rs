//! A memory search hit's score: its relevance (cosine and keyword score)
//! reranked by importance, recency and frequency. The weights are the
//! caller's (Python's `context_core.memory_store.ranking` names them); this
//! computes that module's formula with them operation for operation in
//! f64, as Python would, so the two give the same bits.

/// The weights of a score, and the two divisors of its recency and
/// frequency terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    pub vector: f64,
    pub keyword: f64,
    pub importance: f64,
    pub recency: f64,
    pub frequency: f64,
    /// The recency term's half-life, in seconds.
    pub recency_span: f64,
    /// `ln(1 + accesses)` at which the frequency term reaches 1.
    pub log_frequent: f64,
}

/// Python's `max(value, 0.0)`: the value unless zero is greater (so a NaN
/// stays NaN, where `f64::max` would give zero).
fn at_least_zero(value: f64) -> f64 {
    if 0.0 > value { 0.0 } else { value }
}

/// The score of a hit with `cosine` and `keyword` (its BM25 over the
/// search's best), of `importance`, last accessed `age` seconds ago and
/// `accesses` times: its relevance, `vector * cosine + keyword * keyword`,
/// then `importance * importance`, `recency * 0.5^(age / span)` and
/// `frequency * min(1, ln(1 + accesses) / log_frequent)`, added in that
/// order.
pub fn score(
    w: &Weights,
    cosine: f64,
    keyword: f64,
    importance: f64,
    age: f64,
    accesses: f64,
) -> f64 {
    let relevance = w.vector * cosine + w.keyword * keyword;
    // The base hidden from the optimiser: seeing the constant 0.5, it calls
    // exp2(-x) instead of pow, which differs from Python's `0.5 ** x` by an
    // ulp for about one age in a thousand.
    let freshness = std::hint::black_box(0.5f64).powf(at_least_zero(age) / w.recency_span);
    let frequency = at_least_zero(accesses).ln_1p() / w.log_frequent;
    // Python's `min(1.0, frequency)`: one unless the frequency is less.
    let frequency = if frequency < 1.0 { frequency } else { 1.0 };
    relevance + w.importance * importance + w.recency * freshness + w.frequency * frequency
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEIGHTS: Weights = Weights {
        vector: 0.6,
        keyword: 0.25,
        importance: 0.1,
        recency: 0.05,
        frequency: 0.05,
        recency_span: 30.0 * 86_400.0,
        log_frequent: 4.615_120_516_841_26, // ln(101)
    };

    #[test]
    fn the_terms_add_up_as_named() {
        // Fresh, never accessed: relevance, importance and the whole recency term.
        let s = score(&WEIGHTS, 0.5, 1.0, 1.0, 0.0, 0.0);
        assert!((s - (0.3 + 0.25 + 0.1 + 0.05)).abs() < 1e-12);
        // One half-life old: half the recency term; a future access counts as now.
        let old = score(&WEIGHTS, 0.0, 0.0, 0.0, 30.0 * 86_400.0, 0.0);
        assert!((old - 0.025).abs() < 1e-12);
        assert!((score(&WEIGHTS, 0.0, 0.0, 0.0, -5.0, 0.0) - 0.05).abs() < 1e-15);
        // A hundred accesses or more: the whole frequency term.
        let used = score(&WEIGHTS, 0.0, 0.0, 0.0, f64::INFINITY, 1e6);
        assert!((used - 0.05).abs() < 1e-12);
        assert!(score(&WEIGHTS, 0.0, 0.0, 0.0, f64::NAN, 0.0).is_nan());
    }
}
