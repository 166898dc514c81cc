//! Counts of recent multi-token pieces, per thread.
//!
//! Nine pieces in ten of ordinary text are one token and answered by the
//! whole-piece lookup; the tenth ("idempotent", "支付回调服务") costs more than
//! all the others together: a BPE merge with a hash lookup per pair. Words
//! recur, so the counts of the last few thousand such pieces are kept, keyed
//! by their full bytes (a hit is exact, never a hash match alone), the way
//! Hugging Face's BPE keeps a word cache. One table per thread: no lock, and
//! counting on several cores never contends.

use std::cell::RefCell;

/// Slots of the direct-mapped table: about 100 KB a thread.
const SLOTS: usize = 2048;
/// Longer pieces (rare) are counted each time.
pub(crate) const MAX_PIECE: usize = 32;

#[derive(Clone, Copy)]
struct Slot {
    /// The engine's vocabulary, by address; 0: empty.
    owner: usize,
    len: u8,
    count: u8,
    bytes: [u8; MAX_PIECE],
}

const EMPTY: Slot = Slot {
    owner: 0,
    len: 0,
    count: 0,
    bytes: [0; MAX_PIECE],
};

thread_local! {
    static RECENT: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// The count of `piece` (whose hash is `hash`) under vocabulary `owner`:
/// remembered, or from `count` and then remembered.
pub(crate) fn count_of(
    owner: usize,
    piece: &[u8],
    hash: u64,
    count: impl FnOnce() -> usize,
) -> usize {
    if piece.len() > MAX_PIECE {
        return count();
    }
    let at = (hash >> 40) as usize % SLOTS;
    // `try_with`: a thread being torn down just counts, uncached.
    let known = RECENT
        .try_with(|slots| {
            slots
                .borrow()
                .get(at)
                .filter(|slot| slot.owner == owner && &slot.bytes[..usize::from(slot.len)] == piece)
                .map(|slot| usize::from(slot.count))
        })
        .ok()
        .flatten();
    if let Some(known) = known {
        return known;
    }
    let n = count();
    // A piece of at most 32 bytes has at most 32 tokens.
    let Ok(n_small) = u8::try_from(n) else {
        return n;
    };
    let mut slot = Slot {
        owner,
        len: piece.len() as u8,
        count: n_small,
        bytes: [0; MAX_PIECE],
    };
    slot.bytes[..piece.len()].copy_from_slice(piece);
    let _ = RECENT.try_with(|slots| {
        let mut slots = slots.borrow_mut();
        if slots.is_empty() {
            slots.resize(SLOTS, EMPTY);
        }
        slots[at] = slot;
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn hits_are_exact_across_owners_and_colliding_hashes() {
        let computed = Cell::new(0);
        let count = |owner: usize, piece: &[u8], hash: u64| {
            count_of(owner, piece, hash, || {
                computed.set(computed.get() + 1);
                piece.len() % 7 + owner
            })
        };
        // Every piece lands in one slot: each must still get its own count.
        let pieces: [&[u8]; 4] = [b"idempotent", b"idempotenT", b"x", &[7; MAX_PIECE]];
        for round in 0..3 {
            for owner in [1, 2] {
                for piece in pieces {
                    assert_eq!(count(owner, piece, 42), piece.len() % 7 + owner);
                }
            }
            assert_eq!(
                computed.get(),
                8 * (round + 1),
                "a shared slot holds one piece"
            );
        }
        // The same piece in the same slot under another owner is its own.
        assert_eq!(count(1, b"retry", 5 << 40), 6);
        assert_eq!(count(2, b"retry", 5 << 40), 7);
        // A piece alone in its slot is counted once, then remembered.
        computed.set(0);
        for _ in 0..3 {
            assert_eq!(count(1, b"callbacks", 7 << 40), 9 % 7 + 1);
        }
        assert_eq!(computed.get(), 1);
        // Longer pieces are not kept.
        let long = [b'a'; MAX_PIECE + 1];
        for _ in 0..2 {
            assert_eq!(count(1, &long, 9 << 40), long.len() % 7 + 1);
        }
        assert_eq!(computed.get(), 3);
    }
}
