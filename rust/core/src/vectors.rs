//! Exact top-k by dot product over a row-major matrix, in float32 or in
//! int8 (the quantised copy, scored in i32 and reranked exactly by the
//! caller). Rows are split over the machine's cores when the matrix is
//! large; each thread keeps its own k best, merged at the end.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::thread;

/// Matrices with fewer values than this are scanned on the calling thread.
pub const PARALLEL_MIN_VALUES: usize = 1 << 21;

#[derive(Clone, Copy, PartialEq)]
struct Scored(f32, usize);

impl Eq for Scored {}

impl Ord for Scored {
    // The heap's top is the worst kept: lowest score, then the later row.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn keep(heap: &mut BinaryHeap<Scored>, k: usize, item: Scored) {
    if heap.len() < k {
        heap.push(item);
    } else if let Some(worst) = heap.peek()
        && item.cmp(worst) == Ordering::Less
    {
        heap.pop();
        heap.push(item);
    }
}

fn scan<T: Copy + Sync>(
    matrix: &[T],
    dim: usize,
    k: usize,
    score: impl Fn(&[T]) -> f32 + Sync,
) -> Vec<(usize, f32)> {
    let rows = matrix.len().checked_div(dim).unwrap_or(0);
    if k == 0 || rows == 0 {
        return Vec::new();
    }
    let part = |first: usize, chunk: &[T]| {
        let score = &score;
        let mut heap = BinaryHeap::with_capacity(k + 1);
        for (i, row) in chunk.chunks_exact(dim).enumerate() {
            keep(&mut heap, k, Scored(score(row), first + i));
        }
        heap
    };
    let threads = crate::parallel::thread_count();
    let mut heap = if threads > 1 && matrix.len() >= PARALLEL_MIN_VALUES {
        let per = rows.div_ceil(threads);
        thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (start, end) = ((t * per).min(rows), ((t + 1) * per).min(rows));
                    let chunk = &matrix[start * dim..end * dim];
                    s.spawn(move || part(start, chunk))
                })
                .collect();
            let mut all = BinaryHeap::with_capacity(k * threads);
            for handle in handles {
                for item in handle.join().expect("a scan thread does not panic") {
                    keep(&mut all, k, item);
                }
            }
            all
        })
    } else {
        part(0, matrix)
    };
    let mut best: Vec<Scored> = std::iter::from_fn(|| heap.pop()).collect();
    best.reverse();
    best.into_iter().map(|Scored(s, i)| (i, s)).collect()
}

/// The `k` rows of `matrix` (`dim` wide) with the highest dot product with
/// `query`, best first (ties: the earlier row first).
pub fn top_k_f32(matrix: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<(usize, f32)> {
    assert_eq!(query.len(), dim, "the query has the matrix's width");
    scan(matrix, dim, k, |row| dot(row, query))
}

/// A dot product in eight lanes, so the compiler can keep it in SIMD
/// registers (a plain sum is one long dependency chain).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (head_a, tail_a) = a.split_at(a.len() - a.len() % 8);
    let (head_b, tail_b) = b.split_at(head_a.len());
    for (x, y) in head_a.chunks_exact(8).zip(head_b.chunks_exact(8)) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f32 = tail_a.iter().zip(tail_b).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// [`top_k_f32`] over int8 rows and an int8 query, scored exactly in i32.
pub fn top_k_i8(matrix: &[i8], dim: usize, query: &[i8], k: usize) -> Vec<(usize, f32)> {
    assert_eq!(query.len(), dim, "the query has the matrix's width");
    scan(matrix, dim, k, |row| dot_i8(row, query) as f32)
}

/// An int8 dot product. Each product fits in i16 (at most 128 * 128), and
/// written that way the compiler multiplies 16 bits wide and adds pairs
/// into i32 lanes (`pmaddwd`), several times faster than 32-bit products.
#[allow(clippy::inline_always)] // it must be inlined into the AVX2 copy of `int8_scores`
#[inline(always)]
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let (head_a, tail_a) = a.split_at(a.len() - a.len() % 16);
    let (head_b, tail_b) = b.split_at(head_a.len());
    for (x, y) in head_a.chunks_exact(16).zip(head_b.chunks_exact(16)) {
        for i in 0..16 {
            lanes[i] += i32::from(i16::from(x[i]) * i16::from(y[i]));
        }
    }
    let tail: i32 = tail_a
        .iter()
        .zip(tail_b)
        .map(|(x, y)| i32::from(i16::from(*x) * i16::from(*y)))
        .sum();
    lanes.iter().sum::<i32>() + tail
}

/// The scaled int8 score of each row of `rows`, into `out`: the hot loop
/// of the quantised scan. `multiversion` compiles it for AVX2 too and picks
/// that copy at run time where the CPU has it (1.5x in a probe), with no
/// unsafe code here.
#[multiversion::multiversion(targets("x86_64+avx2+fma", "x86_64+avx"))]
fn int8_scores(rows: &[i8], dim: usize, query: &[i8], scales: &[f32], out: &mut [f32]) {
    for ((row, scale), score) in rows.chunks_exact(dim).zip(scales).zip(out.iter_mut()) {
        *score = dot_i8(row, query) as f32 * scale;
    }
}

/// [`int8_scores`] of every row, split over the cores for a large matrix.
fn all_int8_scores(rows: &[i8], dim: usize, query: &[i8], scales: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; scales.len()];
    let threads = crate::parallel::thread_count();
    if threads > 1 && rows.len() >= PARALLEL_MIN_VALUES {
        let per = scales.len().div_ceil(threads);
        thread::scope(|s| {
            for (t, part) in out.chunks_mut(per).enumerate() {
                let start = t * per;
                let end = start + part.len();
                let (rows, scales) = (&rows[start * dim..end * dim], &scales[start..end]);
                s.spawn(move || int8_scores(rows, dim, query, scales, part));
            }
        });
    } else {
        int8_scores(rows, dim, query, scales, &mut out);
    }
    out
}

/// Rows of one width, kept twice: float32 for exact scores, and int8 with a
/// scale per row for a scan a quarter the size. Removing a row moves the
/// last one into its place (the caller's row ids do the same).
#[derive(Debug, Default)]
pub struct VectorIndex {
    dim: usize,
    exact: Vec<f32>,
    quantised: Vec<i8>,
    scales: Vec<f32>,
}

fn quantise(row: &[f32], out: &mut [i8]) -> f32 {
    let largest = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if largest == 0.0 {
        out.fill(0);
        return 0.0;
    }
    for (q, v) in out.iter_mut().zip(row) {
        *q = (v * 127.0 / largest).round() as i8;
    }
    largest / 127.0
}

impl VectorIndex {
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            ..Self::default()
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Appends `rows` (a whole number of rows).
    pub fn extend(&mut self, rows: &[f32]) {
        assert!(rows.len().is_multiple_of(self.dim.max(1)), "whole rows");
        for row in rows.chunks_exact(self.dim) {
            self.exact.extend_from_slice(row);
            let at = self.quantised.len();
            self.quantised.resize(at + self.dim, 0);
            let scale = quantise(row, &mut self.quantised[at..]);
            self.scales.push(scale);
        }
    }

    /// Replaces row `index`.
    pub fn set(&mut self, index: usize, row: &[f32]) {
        let span = index * self.dim..(index + 1) * self.dim;
        self.exact[span.clone()].copy_from_slice(row);
        self.scales[index] = quantise(row, &mut self.quantised[span]);
    }

    /// Removes row `index`, moving the last row into its place.
    pub fn swap_remove(&mut self, index: usize) {
        let last = self.len() - 1;
        if index != last {
            let (d, from) = (self.dim, last * self.dim);
            self.exact.copy_within(from..from + d, index * d);
            self.quantised.copy_within(from..from + d, index * d);
            self.scales[index] = self.scales[last];
        }
        self.exact.truncate(last * self.dim);
        self.quantised.truncate(last * self.dim);
        self.scales.truncate(last);
    }

    /// The exact score of each of `rows` for `query` (a row past the end
    /// scores NaN).
    pub fn scores(&self, query: &[f32], rows: &[usize]) -> Vec<f32> {
        rows.iter()
            .map(
                |&i| match self.exact.get(i * self.dim..(i + 1) * self.dim) {
                    Some(row) => dot(row, query),
                    None => f32::NAN,
                },
            )
            .collect()
    }

    /// The exact best `k` rows for `query`, best first.
    pub fn top_k(&self, query: &[f32], k: usize) -> Vec<(usize, f32)> {
        top_k_f32(&self.exact, self.dim, query, k)
    }

    /// The best `k` by the int8 scan of `candidates` rows, then rescored
    /// exactly: the same answer as [`top_k`](Self::top_k) unless the
    /// quantisation moved a row out of the candidates.
    pub fn top_k_quantised(&self, query: &[f32], k: usize, candidates: usize) -> Vec<(usize, f32)> {
        let mut q = vec![0i8; self.dim];
        quantise(query, &mut q);
        let scores = all_int8_scores(&self.quantised, self.dim, &q, &self.scales);
        let rough = scan(&scores, 1, candidates.max(k), |score| score[0]);
        let mut exact: Vec<(usize, f32)> = rough
            .into_iter()
            .map(|(i, _)| (i, dot(&self.exact[i * self.dim..(i + 1) * self.dim], query)))
            .collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        exact.truncate(k);
        exact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_the_rows_exact_dot_products() {
        let mut index = VectorIndex::new(2);
        index.extend(&[1.0, 0.0, 0.6, 0.8, 0.0, 1.0]);
        let found = index.scores(&[0.6, 0.8], &[1, 0, 2, 3]);
        assert_eq!(&found[..3], &[1.0, 0.6, 0.8]);
        assert!(found[3].is_nan());
    }

    #[test]
    fn best_first_and_ties_by_row() {
        let matrix = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5];
        let found = top_k_f32(&matrix, 2, &[1.0, 0.0], 3);
        assert_eq!(found, [(0, 1.0), (2, 1.0), (3, 0.5)]);
        let quantised = [10i8, 0, 0, 10, 10, 0];
        assert_eq!(top_k_i8(&quantised, 2, &[0, 1], 1), [(1, 10.0)]);
        assert!(top_k_f32(&[], 2, &[1.0, 0.0], 3).is_empty());
    }

    #[test]
    fn parallel_scan_agrees_with_one_thread() {
        let dim = 16;
        let rows = PARALLEL_MIN_VALUES / dim + 7;
        let matrix: Vec<i8> = (0..rows * dim).map(|i| ((i * 7919) % 255) as i8).collect();
        let query: Vec<i8> = (0..dim).map(|i| (i as i8) - 8).collect();
        let found = top_k_i8(&matrix, dim, &query, 5);
        let mut all: Vec<(usize, f32)> = matrix
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, r)| {
                (
                    i,
                    r.iter()
                        .zip(&query)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum::<i32>() as f32,
                )
            })
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(found, all[..5]);
    }
}
