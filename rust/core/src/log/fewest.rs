//! An index over a list of units' tokens for greedy filling: the newest
//! unit at or before a place that still fits the room left, found without
//! walking past every one that does not.

/// The tokens of a list's units, with the fewest of each block of 64, of
/// each 64 blocks and so on: the newest entry at or before a place that
/// could still fit is found in a few hundred steps, not by walking the list.
#[derive(Debug, Default)]
pub(super) struct Fewest {
    /// `levels[0]`: each entry's tokens; `levels[k + 1][i]`: the fewest of
    /// `levels[k][FAN * i..FAN * i + FAN]`. The top row has at most `FAN`.
    levels: Vec<Vec<u32>>,
}

const FAN: usize = 64;

impl Fewest {
    /// The tokens of entry `i`.
    pub(super) fn tokens(&self, i: usize) -> u32 {
        self.levels[0][i]
    }

    pub(super) fn push(&mut self, tokens: u32) {
        let Some(first) = self.levels.first() else {
            self.levels.push(vec![tokens]);
            return;
        };
        let (mut value, mut at, mut level) = (tokens, first.len(), 0);
        loop {
            let top = level + 1 == self.levels.len();
            let row = &mut self.levels[level];
            if at == row.len() {
                row.push(value);
            } else {
                // Entries are only added: a block's fewest only falls.
                row[at] = row[at].min(value);
                value = row[at];
            }
            if top {
                if row.len() > FAN {
                    let top = row.chunks(FAN).map(block_min).collect();
                    self.levels.push(top);
                }
                return;
            }
            at /= FAN;
            level += 1;
        }
    }

    /// The last entry at or before `upto` with at most `most` tokens.
    pub(super) fn last_at_most(&self, upto: usize, most: u32) -> Option<usize> {
        let top = self.levels.len() - 1;
        let (mut level, mut i) = (0, upto);
        // Up: the rest of this block, else the blocks before it, a level up.
        let (mut level, mut j) = loop {
            let row = &self.levels[level];
            let start = if level == top { 0 } else { i - i % FAN };
            if let Some(j) = (start..=i).rev().find(|&j| row[j] <= most) {
                break (level, j);
            }
            if start == 0 {
                return None;
            }
            (level, i) = (level + 1, start / FAN - 1);
        };
        // Down: the last entry of the block that holds one.
        while level > 0 {
            level -= 1;
            let row = &self.levels[level];
            let start = j * FAN;
            j = (start..(start + FAN).min(row.len()))
                .rev()
                .find(|&k| row[k] <= most)
                .expect("a block holds its fewest");
        }
        Some(j)
    }
}

fn block_min(block: &[u32]) -> u32 {
    block.iter().copied().min().unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::{FAN, Fewest};

    #[test]
    fn the_fewest_index_finds_what_a_walk_back_finds() {
        // Sizes around the block edges, values from a small LCG.
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as u32 % 40
        };
        for len in [1, 2, FAN - 1, FAN, FAN + 1, FAN * FAN, FAN * FAN + 3, 9_000] {
            let (mut fewest, mut values) = (Fewest::default(), Vec::new());
            for _ in 0..len {
                let value = next();
                fewest.push(value);
                values.push(value);
            }
            for upto in (0..len).step_by(len / 50 + 1).chain([len - 1]) {
                for most in [0, 1, 3, 10, 39, u32::MAX] {
                    let walked = (0..=upto).rev().find(|&i| values[i] <= most);
                    assert_eq!(
                        fewest.last_at_most(upto, most),
                        walked,
                        "{len} {upto} {most}"
                    );
                }
            }
        }
    }
}
