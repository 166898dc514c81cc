//! Helpers shared by the unit tests.

/// A tiny deterministic generator, so differential tests need no crate.
pub(crate) struct Lcg(u64);

impl Lcg {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }

    /// Up to `max_len - 1` chars drawn from `pool`.
    pub(crate) fn text(&mut self, pool: &[char], max_len: usize) -> String {
        let len = self.below(max_len);
        (0..len).map(|_| pool[self.below(pool.len())]).collect()
    }
}
