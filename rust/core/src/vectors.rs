//! Top-k by dot product: exact over float32 rows, or over the int8 copy
//! (kept in blocks stored column by column, so a sparse query reads only
//! its non-zero dimensions) and then rescored exactly. Asked to, a sparse
//! query with more than [`SCAN_TERMS`] dimensions is scanned by its largest
//! ones only, for a larger pool of candidates. Large scans are split over
//! the machine's cores; each thread keeps its own best, merged at the end.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::thread;

/// Matrices with fewer values than this are scanned on the calling thread.
pub const PARALLEL_MIN_VALUES: usize = 1 << 21;

/// An int8 scan reading fewer values than this (rows times the query's
/// terms) runs on the calling thread. Inside a session's turn at 100,000
/// rows (a cut query reads up to 4.8M values), alternated three runs
/// each, one thread took 0.55-0.59 ms at the median against 0.72-0.85 ms
/// for two: starting a thread costs 0.1-0.2 ms on a virtual machine, more
/// than the split saves at that size.
pub const PARALLEL_SCAN_VALUES: usize = 1 << 23;

/// The most dimensions the int8 scan reads, when asked to cut (see
/// [`VectorIndex::top_k_quantised_cut`]), of a sparse query (one non-zero
/// in at most half the dimensions once quantised): a query with more is
/// scanned by these many of its largest values (ties: the lower
/// dimension) for [`CUT_POOL`] times the candidates, then rescored exactly
/// with all of it. The scan's cost follows the dimensions it reads: up to
/// half the dimensions, a long input costs what a 48-term one does. On the
/// 100,000 memories of the replayed sessions' store (the hashing embedder,
/// 256 dimensions) the 240 user inputs (16-88 terms, 76 of them cut) still
/// found every exact best 32; inputs of two to five messages run together
/// (99 terms at the median) found 99.4% of them. On vectors with no
/// structure (random rows) a 100-term query found 92% of the best 8, so
/// the store cuts only its built-in embedder's queries. A dense query (an
/// embedding model's) is never cut: scanned by its 48 largest of 256
/// dimensions it found 81%.
pub const SCAN_TERMS: usize = 48;

/// How many times the candidates a cut query's scan keeps.
pub const CUT_POOL: usize = 4;

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
    wanted: impl Fn(usize) -> bool + Sync,
) -> Vec<(usize, f32)> {
    let rows = matrix.len().checked_div(dim).unwrap_or(0);
    let k = k.min(rows); // never more room than rows, whatever k a caller asks
    if k == 0 {
        return Vec::new();
    }
    let part = |first: usize, chunk: &[T]| {
        let (score, wanted) = (&score, &wanted);
        let mut heap = BinaryHeap::with_capacity(k + 1);
        for (i, row) in chunk.chunks_exact(dim).enumerate() {
            if wanted(first + i) {
                keep(&mut heap, k, Scored(score(row), first + i));
            }
        }
        heap
    };
    let threads = if matrix.len() >= PARALLEL_MIN_VALUES {
        crate::parallel::thread_count()
    } else {
        1
    };
    let per = rows.div_ceil(threads);
    let heap = merged(
        k,
        in_parts(threads, |t| {
            let (start, end) = ((t * per).min(rows), ((t + 1) * per).min(rows));
            part(start, &matrix[start * dim..end * dim])
        }),
    );
    best_first(heap)
}

/// The best `k` of several parts' heaps (one part: that heap as it is).
fn merged(k: usize, mut heaps: Vec<BinaryHeap<Scored>>) -> BinaryHeap<Scored> {
    if heaps.len() == 1 {
        return heaps.pop().expect("one heap");
    }
    let mut all = BinaryHeap::with_capacity(k + 1);
    for item in heaps.into_iter().flatten() {
        keep(&mut all, k, item);
    }
    all
}

/// `(row, score)` of a heap's items, best first.
fn best_first(mut heap: BinaryHeap<Scored>) -> Vec<(usize, f32)> {
    let mut best: Vec<Scored> = std::iter::from_fn(|| heap.pop()).collect();
    best.reverse();
    best.into_iter().map(|Scored(s, i)| (i, s)).collect()
}

/// `work(t)` for each part `t` of `0..parts`, in order: the first on the
/// calling thread, the others on scoped threads. A part whose thread the OS
/// refuses (a process limit in a container) runs on the calling thread too,
/// so a scan never fails for want of a thread.
fn in_parts<R: Send>(parts: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    thread::scope(|s| {
        let work = &work;
        let spawned: Vec<_> = (1..parts)
            .map(|t| {
                (
                    t,
                    thread::Builder::new().spawn_scoped(s, move || work(t)).ok(),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(parts.max(1));
        out.push(work(0));
        for (t, handle) in spawned {
            out.push(match handle {
                Some(handle) => handle.join().expect("a scan thread does not panic"),
                None => work(t),
            });
        }
        out
    })
}

/// The `k` rows of `matrix` (`dim` wide) with the highest dot product with
/// `query`, best first (ties: the earlier row first).
pub fn top_k_f32(matrix: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<(usize, f32)> {
    assert_eq!(query.len(), dim, "the query has the matrix's width");
    scan(matrix, dim, k, |row| dot(row, query), |_| true)
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

/// The int8 scores (before scaling) of the first `rows` rows of the tail,
/// stored as a block is but `stride` rows to a column (its capacity):
/// `acc[r]` is the sum of `column_j[r] * q` over the query's non-zero
/// dimensions `(j, q)`. So a query reads only its own dimensions of the
/// tail, as of a block: read row by row, the tail cost every dimension of
/// every row (at 100,000 rows, 1,696 of them in the tail, 0.045 ms a
/// search; 0.115 ms with 4,095).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn tail_scores(
    tail: &[i8],
    stride: usize,
    rows: usize,
    terms: &[(usize, i16)],
    acc: &mut Vec<i32>,
) {
    acc.clear();
    acc.resize(rows, 0);
    for &(j, q) in terms {
        let column = &tail[j * stride..j * stride + rows];
        for (a, v) in acc.iter_mut().zip(column) {
            *a += i32::from(i16::from(*v) * q);
        }
    }
}

/// Rows per full block of the int8 copy. A full block is stored dimension
/// by dimension (each dimension's `BLOCK` values contiguous), so a query
/// reads only the dimensions where it is non-zero (the hashing embedder's
/// queries are about one in eight), in runs long enough (4 KB) that the
/// memory's latency is paid once a run, not once a row.
pub const BLOCK: usize = 4096;

/// The int8 scores (before scaling) of one full block's rows, into `acc`:
/// for each non-zero query dimension `(j, q)`, `acc[r] += column_j[r] * q`.
/// Dimensions go in pairs, whose two products fit in i16 together (at most
/// 2 * 127 * 127), so the loop multiplies and adds 16 bits wide before
/// widening. `multiversion` compiles it for AVX2 too and picks that copy at
/// run time where the CPU has it, with no unsafe code here.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "x86_64+avx"
))]
fn block_scores(block: &[i8], terms: &[(usize, i16)], acc: &mut [i32]) {
    let acc: &mut [i32; BLOCK] = acc.try_into().expect("one block of accumulators");
    acc.fill(0);
    let column = |j: usize| -> &[i8; BLOCK] {
        block[j * BLOCK..(j + 1) * BLOCK]
            .try_into()
            .expect("a whole column")
    };
    // Eight dimensions a pass (four pairs): eight columns read side by side
    // keep more of the memory's loads in flight than four did, and a scan
    // of a large index is bound by those loads, not by the arithmetic. At
    // 100,000 rows, with the caches emptied between queries (as a session's
    // turn leaves them), the replayed sessions' queries took 0.38-0.41 ms
    // at the median against 0.46-0.49 ms four a pass; sixteen a pass was
    // slower again (0.44-0.47).
    let mut octets = terms.chunks_exact(8);
    for eight in &mut octets {
        let c: [&[i8; BLOCK]; 8] = std::array::from_fn(|i| column(eight[i].0));
        let q: [i16; 8] = std::array::from_fn(|i| eight[i].1);
        for r in 0..BLOCK {
            let first = i16::from(c[0][r]) * q[0] + i16::from(c[1][r]) * q[1];
            let second = i16::from(c[2][r]) * q[2] + i16::from(c[3][r]) * q[3];
            let third = i16::from(c[4][r]) * q[4] + i16::from(c[5][r]) * q[5];
            let fourth = i16::from(c[6][r]) * q[6] + i16::from(c[7][r]) * q[7];
            acc[r] += i32::from(first) + i32::from(second) + i32::from(third) + i32::from(fourth);
        }
    }
    // The rest four a pass, then in a pair, then alone.
    let mut quads = octets.remainder().chunks_exact(4);
    for quad in &mut quads {
        let (c1, c2, c3, c4) = (
            column(quad[0].0),
            column(quad[1].0),
            column(quad[2].0),
            column(quad[3].0),
        );
        let (q1, q2, q3, q4) = (quad[0].1, quad[1].1, quad[2].1, quad[3].1);
        for r in 0..BLOCK {
            let low = i16::from(c1[r]) * q1 + i16::from(c2[r]) * q2;
            let high = i16::from(c3[r]) * q3 + i16::from(c4[r]) * q4;
            acc[r] += i32::from(low) + i32::from(high);
        }
    }
    let mut pairs = quads.remainder().chunks_exact(2);
    for pair in &mut pairs {
        let ((j1, q1), (j2, q2)) = (pair[0], pair[1]);
        let (c1, c2) = (column(j1), column(j2));
        for r in 0..BLOCK {
            acc[r] += i32::from(i16::from(c1[r]) * q1 + i16::from(c2[r]) * q2);
        }
    }
    for &(j, q) in pairs.remainder() {
        let c = column(j);
        for r in 0..BLOCK {
            acc[r] += i32::from(i16::from(c[r]) * q);
        }
    }
}

/// The best `k` offered so far, rows offered in increasing order: once `k`
/// are kept, a score must beat the floor (an equal one is the later row, so
/// worse), one float comparison for most rows. Offers that pass are
/// appended, and the list is cut back to its best `k` when it holds twice
/// as many (a partial sort, linear on average), which raises the floor:
/// a few nanoseconds an offer, where a heap of the best paid a push and a
/// pop (about 2,000 of them for 256 candidates among 100,000 rows).
struct Best {
    k: usize,
    kept: Vec<Scored>,
    floor: f32,
    full: bool,
}

impl Best {
    fn new(k: usize) -> Self {
        Self {
            k,
            kept: Vec::with_capacity(2 * k),
            floor: f32::NEG_INFINITY,
            full: false,
        }
    }

    /// Offers each wanted row of a block (`scores[i]` is row `first + i`).
    /// Once `k` are kept, a run of rows none of which beats the floor is
    /// passed over with one vector comparison: those offers would all
    /// have been refused, so the best kept are the same.
    fn offer_block(&mut self, first: usize, scores: &[f32], wanted: impl Fn(usize) -> bool) {
        const RUN: usize = 16;
        for (n, run) in scores.chunks(RUN).enumerate() {
            if self.full && !any_above(run, self.floor) {
                continue;
            }
            let start = first + n * RUN;
            for (i, &score) in run.iter().enumerate() {
                if wanted(start + i) {
                    self.offer(score, start + i);
                }
            }
        }
    }

    #[inline]
    fn offer(&mut self, score: f32, row: usize) {
        if self.k == 0 || (self.full && score <= self.floor) {
            return;
        }
        self.kept.push(Scored(score, row));
        if self.kept.len() >= 2 * self.k {
            self.cut();
        }
    }

    /// Keeps the best `k`; the floor becomes the worst of them.
    fn cut(&mut self) {
        if self.k > 0 && self.kept.len() > self.k {
            cut_to_best(&mut self.kept, self.k);
            self.floor = self.kept[self.k - 1].0;
            self.full = true;
        }
    }

    /// The best `k`, in no order.
    fn into_kept(mut self) -> Vec<Scored> {
        self.cut();
        self.kept
    }
}

/// Cuts `items` to their best `k` by the full order (score, then the
/// earlier row), the worst of them last, the rest in no order: a partial
/// sort, linear on average.
fn cut_to_best(items: &mut Vec<Scored>, k: usize) {
    if k > 0 && items.len() > k {
        // Scored orders best first (the lower is the better).
        items.select_nth_unstable(k - 1);
    }
    items.truncate(k);
}

/// `out[r] = acc[r] as f32 * scale[r]`: the int8 sums scaled, as one
/// vector loop.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma"
))]
fn scaled(acc: &[i32], scales: &[f32], out: &mut [f32]) {
    for ((o, a), s) in out.iter_mut().zip(acc).zip(scales) {
        *o = *a as f32 * s;
    }
}

/// Whether any of `scores` is not at or below `floor` (a NaN counts, as
/// [`Best::offer`] takes one), without a branch per value.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma"
))]
#[allow(clippy::neg_cmp_op_on_partial_ord, clippy::needless_bitwise_bool)] // NaN counts; no branch
fn any_above(scores: &[f32], floor: f32) -> bool {
    scores.iter().fold(false, |any, &s| any | !(s <= floor))
}

/// A query quantised as the rows are, and its non-zero dimensions.
struct Quantised {
    values: Vec<i8>,
    terms: Vec<(usize, i16)>,
}

impl Quantised {
    fn new(query: &[f32]) -> Self {
        let mut values = vec![0i8; query.len()];
        quantise(query, &mut values);
        Self::of(values)
    }

    fn of(values: Vec<i8>) -> Self {
        let terms = values
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(j, v)| (j, i16::from(*v)))
            .collect();
        Self { values, terms }
    }

    /// The query the scan reads, and whether it was cut: a sparse one with
    /// more than [`SCAN_TERMS`] terms keeps only its largest (the others
    /// zero, so the tail reads only the kept ones too).
    fn for_scan(self) -> (Self, bool) {
        if self.terms.len() <= SCAN_TERMS || self.terms.len() > self.values.len() / 2 {
            return (self, false);
        }
        let Self { values, mut terms } = self;
        terms.sort_by_key(|&(j, v)| (std::cmp::Reverse(v.unsigned_abs()), j));
        let mut kept = vec![0i8; values.len()];
        for &(j, _) in &terms[..SCAN_TERMS] {
            kept[j] = values[j];
        }
        (Self::of(kept), true)
    }
}

/// Rows of one width, kept twice: float32 (row by row) for exact scores,
/// and int8 with a scale per row for a scan a quarter the size or less.
/// The int8 rows are in full blocks of [`BLOCK`] rows stored column by
/// column, and a tail of fewer than `BLOCK` rows stored the same way with
/// room for a power of two of rows, from [`TAIL_MIN`] (so a small index
/// holds little padding), doubled as it fills. Removing a row moves the
/// last one into its place (the caller's row ids do the same).
#[derive(Debug, Default)]
pub struct VectorIndex {
    dim: usize,
    exact: Vec<f32>,
    blocks: Vec<i8>,
    /// The rows after the full blocks, `tail_stride` values to a column;
    /// `tail_rows` of each column are rows, the rest room.
    tail: Vec<i8>,
    tail_stride: usize,
    tail_rows: usize,
    scales: Vec<f32>,
    /// A small tag per row (the store's memory kind), for masked searches.
    tags: Vec<u8>,
}

/// A search mask over row tags: bit `t` set keeps the rows tagged `t`.
pub const ALL_TAGS: u8 = u8::MAX;

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

/// The fewest rows the tail has room for.
const TAIL_MIN: usize = 8;

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

    /// Rows held in full blocks.
    fn in_blocks(&self) -> usize {
        self.blocks.len() / self.dim.max(1)
    }

    /// Writes row `index`'s int8 values where it is held.
    fn put_quantised(&mut self, index: usize, values: &[i8]) {
        let d = self.dim;
        let full = self.in_blocks();
        if index < full {
            let (block, r) = (index / BLOCK, index % BLOCK);
            let base = block * d * BLOCK + r;
            for (j, v) in values.iter().enumerate() {
                self.blocks[base + j * BLOCK] = *v;
            }
        } else {
            let (r, stride) = (index - full, self.tail_stride);
            for (j, v) in values.iter().enumerate() {
                self.tail[j * stride + r] = *v;
            }
        }
    }

    /// The int8 values of the tail's row `r`.
    fn tail_row(&self, r: usize) -> Vec<i8> {
        (0..self.dim)
            .map(|j| self.tail[j * self.tail_stride + r])
            .collect()
    }

    /// Appends one row's int8 values to the tail, room made first; a full
    /// tail (its room then `BLOCK` rows, a block's layout) becomes a block.
    fn push_quantised(&mut self, values: &[i8]) {
        let d = self.dim;
        if self.tail_rows == self.tail_stride {
            let stride = (2 * self.tail_stride).clamp(TAIL_MIN, BLOCK);
            let mut tail = vec![0i8; d * stride];
            for j in 0..d {
                let from = j * self.tail_stride;
                tail[j * stride..j * stride + self.tail_rows]
                    .copy_from_slice(&self.tail[from..from + self.tail_rows]);
            }
            (self.tail, self.tail_stride) = (tail, stride);
        }
        self.tail_rows += 1;
        self.put_quantised(self.len() - 1, values);
        if self.tail_rows == BLOCK {
            self.blocks.extend_from_slice(&self.tail);
            self.tail_rows = 0; // the room stays, for the next block's rows
        }
    }

    /// Appends `rows` (a whole number of rows), tagged 0.
    pub fn extend(&mut self, rows: &[f32]) {
        let count = rows.len() / self.dim.max(1);
        self.extend_tagged(rows, &vec![0; count]);
    }

    /// Appends `rows`, one tag (below 8) per row.
    pub fn extend_tagged(&mut self, rows: &[f32], tags: &[u8]) {
        assert!(rows.len().is_multiple_of(self.dim.max(1)), "whole rows");
        assert_eq!(rows.len() / self.dim.max(1), tags.len(), "a tag per row");
        assert!(tags.iter().all(|t| *t < 8), "tags are below 8");
        // Room for the batch at once: a load of 100,000 rows otherwise
        // copies the growing float32 rows (100 MB) several times over.
        let count = tags.len();
        self.exact.reserve(rows.len());
        self.scales.reserve(count);
        self.tags.reserve(count);
        self.blocks
            .reserve((self.tail_rows + count) / BLOCK * BLOCK * self.dim);
        self.tags.extend_from_slice(tags);
        let d = self.dim;
        let mut values = vec![0i8; d];
        for row in rows.chunks_exact(d) {
            self.exact.extend_from_slice(row);
            self.scales.push(quantise(row, &mut values));
            self.push_quantised(&values);
        }
    }

    /// Replaces row `index` and its tag.
    pub fn set_tagged(&mut self, index: usize, row: &[f32], tag: u8) {
        assert!(tag < 8, "tags are below 8");
        self.tags[index] = tag;
        self.set(index, row);
    }

    /// Replaces row `index` (its tag kept).
    pub fn set(&mut self, index: usize, row: &[f32]) {
        let span = index * self.dim..(index + 1) * self.dim;
        self.exact[span].copy_from_slice(row);
        let mut values = vec![0i8; self.dim];
        self.scales[index] = quantise(row, &mut values);
        self.put_quantised(index, &values);
    }

    /// Removes row `index`, moving the last row into its place.
    pub fn swap_remove(&mut self, index: usize) {
        let d = self.dim;
        if self.tail_rows == 0 {
            // The last row is in the last full block: that block becomes the tail.
            let from = self.blocks.len() - d * BLOCK;
            self.tail = self.blocks.split_off(from);
            (self.tail_stride, self.tail_rows) = (BLOCK, BLOCK);
        }
        let last = self.len() - 1;
        let moved = self.tail_row(self.tail_rows - 1);
        self.tail_rows -= 1;
        if index != last {
            let from = last * d;
            self.exact.copy_within(from..from + d, index * d);
            self.put_quantised(index, &moved);
            self.scales[index] = self.scales[last];
            self.tags[index] = self.tags[last];
        }
        self.exact.truncate(last * d);
        self.scales.truncate(last);
        self.tags.truncate(last);
    }

    /// The exact score of each of `rows` for `query` (a row past the end
    /// scores NaN).
    pub fn scores(&self, query: &[f32], rows: &[usize]) -> Vec<f32> {
        self.fetch_rows(rows.iter().copied());
        rows.iter()
            .map(
                |&i| match self.exact.get(i * self.dim..(i + 1) * self.dim) {
                    Some(row) => dot(row, query),
                    None => f32::NAN,
                },
            )
            .collect()
    }

    /// Reads one value from each cache line of `rows`' float32 copies, so
    /// the scores that follow find them in cache. The rows are scattered
    /// over a large matrix: read together, their misses overlap (the loads
    /// do not depend on each other), where a dot product at a time waits
    /// for each row in turn. Rescoring 128 rows of 256 values out of cache
    /// took 0.090 ms without this and 0.041 ms with it.
    fn fetch_rows(&self, rows: impl Iterator<Item = usize>) {
        const LINE: usize = 64 / std::mem::size_of::<f32>();
        let mut sum = 0f32;
        for i in rows {
            if let Some(row) = self.exact.get(i * self.dim..(i + 1) * self.dim) {
                sum += row.iter().step_by(LINE).sum::<f32>();
            }
        }
        std::hint::black_box(sum);
    }

    /// The exact best `k` rows for `query`, best first.
    pub fn top_k(&self, query: &[f32], k: usize) -> Vec<(usize, f32)> {
        self.top_k_masked(query, k, ALL_TAGS)
    }

    fn wanted(&self, mask: u8) -> impl Fn(usize) -> bool + Sync + '_ {
        move |row| mask == ALL_TAGS || mask & (1 << self.tags[row]) != 0
    }

    /// [`top_k`](Self::top_k) among the rows whose tag is in `mask`.
    pub fn top_k_masked(&self, query: &[f32], k: usize, mask: u8) -> Vec<(usize, f32)> {
        assert_eq!(query.len(), self.dim, "the query has the matrix's width");
        scan(
            &self.exact,
            self.dim,
            k,
            |row| dot(row, query),
            self.wanted(mask),
        )
    }

    /// The int8 scores of blocks `blocks` (then of the tail, if `tail`),
    /// scaled, handed to `each` a block at a time: the first row's number
    /// and the block's scores in row order.
    fn each_quantised(
        &self,
        q: &Quantised,
        blocks: std::ops::Range<usize>,
        tail: bool,
        mut each: impl FnMut(usize, &[f32]),
    ) {
        let span = self.dim * BLOCK;
        let mut acc = vec![0i32; BLOCK];
        let mut scores = vec![0f32; BLOCK];
        for block in blocks {
            block_scores(
                &self.blocks[block * span..(block + 1) * span],
                &q.terms,
                &mut acc,
            );
            let first = block * BLOCK;
            scaled(&acc, &self.scales[first..first + BLOCK], &mut scores);
            each(first, &scores);
        }
        if tail && self.tail_rows > 0 {
            let (stride, rows) = (self.tail_stride, self.tail_rows);
            tail_scores(&self.tail, stride, rows, &q.terms, &mut acc);
            let first = self.in_blocks();
            let rows = acc.len();
            scaled(&acc, &self.scales[first..], &mut scores[..rows]);
            each(first, &scores[..rows]);
        }
    }

    /// The int8 score of every row for `query` (quantised as the rows are):
    /// the sum of products in i32, times the row's scale.
    pub fn quantised_scores(&self, query: &[f32]) -> Vec<f32> {
        let q = Quantised::new(query);
        let mut out = Vec::with_capacity(self.len());
        self.each_quantised(&q, 0..self.in_blocks() / BLOCK, true, |_, scores| {
            out.extend_from_slice(scores);
        });
        out
    }

    /// The `candidates` best rows by int8 score, best first (ties: the
    /// earlier row), the blocks split over the cores for a large index.
    pub fn quantised_best(&self, query: &[f32], candidates: usize, mask: u8) -> Vec<(usize, f32)> {
        self.quantised_best_of(&Quantised::new(query), candidates, mask)
    }

    fn quantised_best_of(&self, q: &Quantised, candidates: usize, mask: u8) -> Vec<(usize, f32)> {
        // The work is the columns the query reads, not the whole matrix.
        let threads = if self.len() * q.terms.len() >= PARALLEL_SCAN_VALUES {
            crate::parallel::thread_count()
        } else {
            1
        };
        self.quantised_best_on(q, candidates, mask, threads)
    }

    /// [`quantised_best`](Self::quantised_best) with the full blocks split
    /// into `threads` parts (the tail goes with the last).
    fn quantised_best_on(
        &self,
        q: &Quantised,
        candidates: usize,
        mask: u8,
        threads: usize,
    ) -> Vec<(usize, f32)> {
        let candidates = candidates.min(self.len());
        let wanted = self.wanted(mask);
        let wanted = &wanted;
        let blocks = self.in_blocks() / BLOCK;
        let threads = threads.clamp(1, blocks.max(1));
        let per = blocks.div_ceil(threads);
        let parts = in_parts(threads, |t| {
            let range = (t * per).min(blocks)..((t + 1) * per).min(blocks);
            let mut best = Best::new(candidates);
            self.each_quantised(q, range, t + 1 == threads, |first, scores| {
                best.offer_block(first, scores, wanted);
            });
            best.into_kept()
        });
        // Each part's best in no order: all of them, cut by the full order
        // (an offer's floor holds only for rows offered in increasing order).
        let mut best: Vec<Scored> = parts.into_iter().flatten().collect();
        cut_to_best(&mut best, candidates);
        best.sort_unstable();
        best.into_iter().map(|Scored(s, i)| (i, s)).collect()
    }

    /// The best `k` by the int8 scan of `candidates` rows, then rescored
    /// exactly: the same answer as [`top_k`](Self::top_k) unless the
    /// quantisation moved a row out of the candidates.
    pub fn top_k_quantised(&self, query: &[f32], k: usize, candidates: usize) -> Vec<(usize, f32)> {
        self.top_k_quantised_masked(query, k, candidates, ALL_TAGS)
    }

    /// [`top_k_quantised`](Self::top_k_quantised) among the rows whose tag
    /// is in `mask`.
    pub fn top_k_quantised_masked(
        &self,
        query: &[f32],
        k: usize,
        candidates: usize,
        mask: u8,
    ) -> Vec<(usize, f32)> {
        self.top_k_quantised_cut(query, k, candidates, mask, false)
    }

    /// [`top_k_quantised_masked`](Self::top_k_quantised_masked); with `cut`,
    /// a sparse query of more than [`SCAN_TERMS`] terms is scanned by its
    /// largest for [`CUT_POOL`] times the candidates, and rescored whole.
    pub fn top_k_quantised_cut(
        &self,
        query: &[f32],
        k: usize,
        candidates: usize,
        mask: u8,
        cut: bool,
    ) -> Vec<(usize, f32)> {
        let whole = Quantised::new(query);
        let (scanned, was_cut) = if cut {
            whole.for_scan()
        } else {
            (whole, false)
        };
        let pool = if was_cut { CUT_POOL } else { 1 };
        let candidates = candidates.max(k).saturating_mul(pool);
        let rough = self.quantised_best_of(&scanned, candidates, mask);
        self.fetch_rows(rough.iter().map(|&(i, _)| i));
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
        assert!(top_k_f32(&[], 2, &[1.0, 0.0], 3).is_empty());
    }

    #[test]
    fn parallel_scan_agrees_with_one_thread() {
        let dim = 16;
        let rows = PARALLEL_MIN_VALUES / dim + 7;
        let matrix: Vec<f32> = (0..rows * dim)
            .map(|i| ((i * 7919) % 255) as f32 - 127.0)
            .collect();
        let query: Vec<f32> = (0..dim).map(|i| i as f32 - 8.0).collect();
        let found = top_k_f32(&matrix, dim, &query, 5);
        let mut all: Vec<(usize, f32)> = matrix
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, r)| (i, r.iter().zip(&query).map(|(a, b)| a * b).sum::<f32>()))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(found, all[..5]);
    }

    /// A small deterministic generator (no dependency for tests).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // One value in four is zero, as in a sparse embedding.
                if x.is_multiple_of(4) {
                    0.0
                } else {
                    (x % 2001) as f32 / 1000.0 - 1.0
                }
            })
            .collect()
    }

    #[test]
    fn the_best_kept_are_the_best_of_a_full_sort_ties_to_the_earlier_row() {
        // Scores from a few values, so ties are many; blocks offered in
        // row order, with a mask, across many cuts of the kept list.
        for (seed, k) in [(1, 1), (2, 7), (3, 64), (4, 300), (5, 5000)] {
            let scores: Vec<f32> = values(seed, 4096)
                .iter()
                .map(|v| (v * 4.0).round())
                .collect();
            let wanted = |row: usize| row % 5 != 3;
            let mut best = Best::new(k);
            for (n, block) in scores.chunks(1000).enumerate() {
                best.offer_block(n * 1000, block, wanted);
            }
            let mut got = best.into_kept();
            got.sort_unstable();
            let mut all: Vec<Scored> = (0..scores.len())
                .filter(|&r| wanted(r))
                .map(|r| Scored(scores[r], r))
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all.truncate(k);
            let pairs = |v: &[Scored]| v.iter().map(|s| (s.1, s.0)).collect::<Vec<_>>();
            assert_eq!(pairs(&got), pairs(&all), "k = {k}");
        }
    }

    /// The int8 score of each row, row by row: what the columns must give.
    fn row_scores(rows: &[f32], dim: usize, query: &[f32]) -> Vec<f32> {
        let mut q = vec![0i8; dim];
        quantise(query, &mut q);
        rows.chunks_exact(dim)
            .map(|row| {
                let mut r = vec![0i8; dim];
                let scale = quantise(row, &mut r);
                r.iter()
                    .zip(&q)
                    .map(|(a, b)| i32::from(*a) * i32::from(*b))
                    .sum::<i32>() as f32
                    * scale
            })
            .collect()
    }

    #[test]
    fn column_scores_equal_the_row_by_row_int8_scores() {
        for (dim, rows) in [
            (3, 1),
            (16, BLOCK - 1),
            (16, BLOCK),
            (17, BLOCK + 1),
            (64, 3 * BLOCK + 5),
        ] {
            let matrix = values(dim as u64, rows * dim);
            let mut index = VectorIndex::new(dim);
            index.extend(&matrix);
            for seed in 0..4 {
                let mut query = values(100 + seed, dim);
                if seed == 3 {
                    query.iter_mut().skip(1).for_each(|v| *v = 0.0); // one term
                }
                assert_eq!(
                    index.quantised_scores(&query),
                    row_scores(&matrix, dim, &query)
                );
            }
            // Every way the terms split into passes of eight, four, two and
            // one: exactly `terms` non-zero values, each at least 1/127 of
            // the largest so none quantises to zero.
            for terms in 0..=dim.min(20) {
                let query: Vec<f32> = (0..dim)
                    .map(|j| {
                        if j < terms {
                            ((j % 5) as f32 - 2.5) / 2.5
                        } else {
                            0.0
                        }
                    })
                    .collect();
                assert_eq!(Quantised::new(&query).terms.len(), terms);
                assert_eq!(
                    index.quantised_scores(&query),
                    row_scores(&matrix, dim, &query)
                );
            }
        }
        let index = VectorIndex::new(8);
        assert!(index.quantised_scores(&[0.0; 8]).is_empty());
    }

    #[test]
    fn the_tail_scores_right_as_its_room_grows_row_by_row() {
        // One row at a time, so the tail's room doubles from TAIL_MIN up to
        // a block; at each size a row in the tail is replaced and one
        // removed (the last moved into its place), and the scores checked.
        let dim = 9;
        let query = values(7, dim);
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut index = VectorIndex::new(dim);
        let mut checks = 0;
        for pushed in 1..=(BLOCK + 2 * TAIL_MIN) as u64 {
            let row = values(pushed, dim);
            index.extend(&row);
            rows.push(row);
            let n = rows.len();
            if pushed.is_power_of_two() || pushed == TAIL_MIN as u64 + 1 {
                let in_tail = n % BLOCK;
                if in_tail > 2 {
                    let at = n - in_tail / 2 - 1; // in the tail, not its first or last
                    let row = values(10_000 + pushed, dim);
                    index.set(at, &row);
                    rows[at] = row;
                    index.swap_remove(at - 1);
                    rows.swap_remove(at - 1);
                }
                assert_eq!(
                    index.quantised_scores(&query),
                    row_scores(&rows.concat(), dim, &query),
                    "{n} rows"
                );
                checks += 1;
            }
        }
        assert!(checks > 10, "every room size was checked");
        assert_eq!(index.tail_rows, rows.len() % BLOCK);
        assert_eq!(index.blocks.len(), rows.len() / BLOCK * dim * BLOCK);
    }

    #[test]
    fn set_and_swap_remove_keep_the_columns_in_step() {
        let dim = 12;
        let mut rows: Vec<Vec<f32>> = (0..2 * BLOCK + 3).map(|i| values(i as u64, dim)).collect();
        let mut index = VectorIndex::new(dim);
        index.extend(&rows.concat());
        for (step, at) in [5usize, 2 * BLOCK + 2, 0, BLOCK, 17]
            .into_iter()
            .enumerate()
        {
            let at = at.min(rows.len() - 1);
            if step % 2 == 0 {
                index.swap_remove(at);
                rows.swap_remove(at);
            } else {
                let row = values(1000 + step as u64, dim);
                index.set(at, &row);
                rows[at] = row;
            }
        }
        while rows.len() > BLOCK - 2 {
            index.swap_remove(0); // empties the last blocks
            rows.swap_remove(0);
        }
        let query = values(99, dim);
        assert_eq!(index.len(), rows.len());
        assert_eq!(
            index.quantised_scores(&query),
            row_scores(&rows.concat(), dim, &query)
        );
        assert_eq!(index.blocks.len(), rows.len() / BLOCK * dim * BLOCK);
        assert_eq!(index.tail_rows, rows.len() % BLOCK);
        let exact = index.top_k(&query, 3);
        assert_eq!(index.top_k_quantised(&query, 3, rows.len()), exact);
    }

    /// The candidates as the scores sorted: best first, ties by row.
    fn sorted_best(index: &VectorIndex, query: &[f32], candidates: usize) -> Vec<(usize, f32)> {
        let mut all: Vec<(usize, f32)> = index
            .quantised_scores(query)
            .into_iter()
            .enumerate()
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(candidates);
        all
    }

    #[test]
    fn the_best_candidates_are_the_best_scores_on_one_thread_or_several() {
        // Small scores repeat, so ties are broken by row across the threads' parts.
        for (dim, rows) in [(4, 10), (8, 3 * BLOCK + 17), (32, 5 * BLOCK + 5)] {
            let matrix: Vec<f32> = values(dim as u64 + 50, rows * dim)
                .into_iter()
                .map(|v| (v * 4.0).round())
                .collect();
            let mut index = VectorIndex::new(dim);
            index.extend(&matrix);
            let query = values(3, dim);
            let q = Quantised::new(&query);
            for candidates in [0, 1, 7, 64] {
                let expected = sorted_best(&index, &query, candidates);
                assert_eq!(index.quantised_best(&query, candidates, ALL_TAGS), expected);
                for threads in [1, 2, 3, 8] {
                    assert_eq!(
                        index.quantised_best_on(&q, candidates, ALL_TAGS, threads),
                        expected,
                        "{threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn a_masked_split_scan_keeps_the_best_whichever_part_falls_short() {
        // Three blocks, one per thread; the mask leaves 125 rows in each of
        // the first two and all of the third, and the scores take three
        // values. The first two parts come back short, the third cut (its
        // list in no order), and the merge must still keep the lowest rows
        // of the tied best, as one thread does.
        let dim = 4;
        let rows = 3 * BLOCK;
        let matrix: Vec<f32> = (0..rows)
            .flat_map(|r| [((r * 7) % 3) as f32 - 1.0, 0.0, 0.0, 0.0])
            .collect();
        let tags: Vec<u8> = (0..rows)
            .map(|r| u8::from(r >= 2 * BLOCK || r % BLOCK < 125))
            .collect();
        let mut index = VectorIndex::new(dim);
        index.extend_tagged(&matrix, &tags);
        let query = [1.0, 0.0, 0.0, 0.0];
        let q = Quantised::new(&query);
        for mask in [0b10u8, 0b11] {
            let keep = |i: usize| mask & (1 << tags[i]) != 0;
            for candidates in [1, 64, 180, 500, BLOCK] {
                let expected: Vec<(usize, f32)> = sorted_best(&index, &query, rows)
                    .into_iter()
                    .filter(|(i, _)| keep(*i))
                    .take(candidates)
                    .collect();
                for threads in [1, 2, 3] {
                    assert_eq!(
                        index.quantised_best_on(&q, candidates, mask, threads),
                        expected,
                        "mask {mask}, {candidates} candidates, {threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn a_long_sparse_query_is_scanned_by_its_largest_terms() {
        let dim = 256;
        // 60 terms at dimensions 10..70: twelve of 127, 28 of -64, then
        // twenty of 20, tied.
        let mut query = vec![0f32; dim];
        for (n, j) in (10..70).enumerate() {
            query[j] = match n {
                0..12 => 127.0,
                12..40 => -64.0,
                _ => 20.0,
            };
        }
        let (scanned, cut) = Quantised::new(&query).for_scan();
        assert!(cut);
        assert_eq!(scanned.terms.len(), SCAN_TERMS);
        // The twelve, the 28, and the first eight of the tied 20s (the
        // lower dimensions).
        let kept: Vec<usize> = scanned.terms.iter().map(|t| t.0).collect();
        assert_eq!(kept, (10..58).collect::<Vec<_>>());
        assert!(scanned.values[58..].iter().all(|v| *v == 0));
        // At the limit, and past half the dimensions, nothing is cut.
        let mut at_limit = vec![0f32; dim];
        at_limit[..SCAN_TERMS].fill(1.0);
        assert!(!Quantised::new(&at_limit).for_scan().1);
        let dense = values(3, dim);
        assert!(Quantised::new(&dense).terms.len() > dim / 2);
        assert!(!Quantised::new(&dense).for_scan().1);
    }

    #[test]
    fn a_cut_query_rescores_a_larger_pool_with_all_its_terms() {
        let (dim, n) = (256, BLOCK + 100);
        let rows = values(17, n * dim);
        let mut index = VectorIndex::new(dim);
        index.extend(&rows);
        let mut query = vec![0f32; dim];
        for j in (0..dim).step_by(3).take(80) {
            query[j] = rows[j] + 0.5;
        }
        let (scanned, cut) = Quantised::new(&query).for_scan();
        assert!(cut);
        let pool = index.quantised_best_of(&scanned, 5 * CUT_POOL, ALL_TAGS);
        let mut expected: Vec<(usize, f32)> = index
            .scores(&query, &pool.iter().map(|p| p.0).collect::<Vec<_>>())
            .into_iter()
            .zip(&pool)
            .map(|(score, &(i, _))| (i, score))
            .collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        expected.truncate(5);
        assert_eq!(
            index.top_k_quantised_cut(&query, 5, 5, ALL_TAGS, true),
            expected
        );
        // Not asked to cut, the whole query is scanned for the pool asked.
        assert_eq!(
            index.top_k_quantised(&query, 5, 5),
            index.top_k_quantised_cut(&query, 5, 5, ALL_TAGS, false)
        );
    }

    #[test]
    fn a_mask_keeps_only_the_rows_of_its_tags() {
        let dim = 8;
        let rows = 2 * BLOCK + 100;
        let matrix = values(11, rows * dim);
        let tags: Vec<u8> = (0..rows).map(|i| (i % 3) as u8).collect();
        let mut index = VectorIndex::new(dim);
        index.extend_tagged(&matrix, &tags);
        index.swap_remove(4); // the last row (tag 1) moves in, with its tag
        let tags: Vec<u8> = (0..index.len())
            .map(|i| {
                if i == 4 {
                    ((rows - 1) % 3) as u8
                } else {
                    (i % 3) as u8
                }
            })
            .collect();
        let query = values(12, dim);
        for mask in [0b001u8, 0b110, 0b100, 0] {
            let keep = |i: usize| mask & (1 << tags[i]) != 0;
            let exact: Vec<(usize, f32)> = index
                .top_k(&query, index.len())
                .into_iter()
                .filter(|(i, _)| keep(*i))
                .take(5)
                .collect();
            assert_eq!(index.top_k_masked(&query, 5, mask), exact);
            let rough: Vec<(usize, f32)> = sorted_best(&index, &query, index.len())
                .into_iter()
                .filter(|(i, _)| keep(*i))
                .take(40)
                .collect();
            assert_eq!(index.quantised_best(&query, 40, mask), rough);
        }
    }

    #[test]
    fn parts_come_back_in_order_whoever_ran_them() {
        assert_eq!(in_parts(1, |t| t * 10), [0]);
        assert_eq!(in_parts(4, |t| t * 10), [0, 10, 20, 30]);
    }
}
