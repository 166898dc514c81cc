//! The offline hashing embedder: words, their character trigrams and
//! Chinese characters (alone and in pairs), each hashed to a signed slot of
//! a fixed-width vector, then L2-normalised. No model, no network, the same
//! vector on every machine. Python's `context_core.reference.embed` is the
//! twin.

/// Width of a hashing embedding unless asked otherwise.
pub const DEFAULT_DIM: usize = 256;

const WORD_WEIGHT: f32 = 1.0;
const TRIGRAM_WEIGHT: f32 = 0.25;
const HAN_WEIGHT: f32 = 0.5;
const HAN_PAIR_WEIGHT: f32 = 1.0;

/// 64-bit FNV-1a: simple enough for the twin to compute identically.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in *part {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

/// A character of a word: ASCII letters and digits, and letters past
/// Latin-1's symbols that are not punctuation, symbols or Chinese.
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || (c as u32 >= 0xC0
            && !is_han(c)
            && !matches!(c as u32,
                0xD7 | 0xF7 | 0x2000..=0x2BFF | 0x3000..=0x303F | 0xFE30..=0xFE4F
                | 0xFF00..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40 | 0xFF5B..=0xFF65)
            && !c.is_whitespace())
}

fn add(out: &mut [f32], weight: f32, parts: &[&[u8]]) {
    let hash = fnv1a(parts);
    let slot = (hash % out.len() as u64) as usize;
    let sign = if (hash >> 32) & 1 == 0 { 1.0 } else { -1.0 };
    out[slot] += sign * weight;
}

fn add_word(out: &mut [f32], word: &str) {
    add(out, WORD_WEIGHT, &[b"w:", word.as_bytes()]);
    let padded: Vec<char> = std::iter::once('<')
        .chain(word.chars())
        .chain(std::iter::once('>'))
        .collect();
    let mut buffer = [0u8; 12];
    for gram in padded.windows(3) {
        let mut len = 0;
        for c in gram {
            len += c.encode_utf8(&mut buffer[len..]).len();
        }
        add(out, TRIGRAM_WEIGHT, &[b"g:", &buffer[..len]]);
    }
}

/// The embedding of `text` into `out` (its width is the dimension): the
/// ASCII-lowered words with their trigrams, each Chinese character and
/// each pair of neighbouring ones; L2-normalised (zero when there are none).
pub fn hash_embed(text: &str, out: &mut [f32]) {
    out.fill(0.0);
    if out.is_empty() {
        return;
    }
    let mut word = String::new();
    let mut previous_han: Option<char> = None;
    let mut buffer = [0u8; 8];
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if is_word_char(c) {
            word.push(c);
            previous_han = None;
            continue;
        }
        if !word.is_empty() {
            add_word(out, &word);
            word.clear();
        }
        if is_han(c) {
            add(
                out,
                HAN_WEIGHT,
                &[b"h:", c.encode_utf8(&mut buffer).as_bytes()],
            );
            if let Some(before) = previous_han {
                let mut pair = [0u8; 8];
                let first = before.encode_utf8(&mut pair).len();
                let second = c.encode_utf8(&mut pair[first..]).len();
                add(out, HAN_PAIR_WEIGHT, &[b"p:", &pair[..first + second]]);
            }
            previous_han = Some(c);
        } else {
            previous_han = None;
        }
    }
    if !word.is_empty() {
        add_word(out, &word);
    }
    let norm = out
        .iter()
        .map(|v| f64::from(*v) * f64::from(*v))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for v in out.iter_mut() {
            *v = (f64::from(*v) / norm) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_is_unit_length_and_shared_words_are_close() {
        let (mut a, mut b, mut c) = ([0f32; 64], [0f32; 64], [0f32; 64]);
        hash_embed("refund the payment for order A-8812", &mut a);
        hash_embed("Refund payment", &mut b);
        hash_embed("日志 轮转", &mut c);
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(dot(&a, &b) > dot(&a, &c));
        let mut empty = [1f32; 8];
        hash_embed("  ,, ", &mut empty);
        assert!(empty.iter().all(|v| *v == 0.0));
    }
}
