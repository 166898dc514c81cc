//! Payload compression: LZ4 blocks, or raw where compressing does not pay.

use std::borrow::Cow;

use super::format::{CODEC_LZ4, CODEC_RAW};

/// Payloads under this many bytes are stored raw: LZ4 saves less than an
/// eighth on most chat messages this short (64% of those of 100-300 bytes,
/// docs/log-format.md), so trying costs time for nothing.
pub const MIN_COMPRESSED_BYTES: usize = 256;

/// The stored form of `raw` and its codec: LZ4 when it saves at least an eighth.
pub fn encode(raw: &[u8]) -> (Cow<'_, [u8]>, u8) {
    if raw.len() >= MIN_COMPRESSED_BYTES {
        let packed = lz4_flex::block::compress(raw);
        if packed.len() <= raw.len() - raw.len() / 8 {
            return (Cow::Owned(packed), CODEC_LZ4);
        }
    }
    (Cow::Borrowed(raw), CODEC_RAW)
}

/// The raw payload, or why it cannot be decoded.
pub fn decode(stored: &[u8], codec: u8, raw_len: usize) -> Result<Vec<u8>, String> {
    match codec {
        CODEC_RAW if stored.len() == raw_len => Ok(stored.to_vec()),
        CODEC_RAW => Err(format!(
            "raw payload of {} bytes, header says {raw_len}",
            stored.len()
        )),
        CODEC_LZ4 => {
            // The decoder allocates raw_len bytes before it reads a byte: a
            // large claim is checked against the block first (a crafted
            // header must not size the buffer).
            if raw_len > CHECK_DECODED_LEN_FROM && decoded_len(stored) != Some(raw_len) {
                return Err(format!(
                    "LZ4 payload does not decode to the {raw_len} bytes the header says"
                ));
            }
            let raw = lz4_flex::block::decompress(stored, raw_len)
                .map_err(|e| format!("LZ4 payload does not decode: {e}"))?;
            if raw.len() == raw_len {
                Ok(raw)
            } else {
                Err(format!(
                    "LZ4 payload decodes to {} bytes, header says {raw_len}",
                    raw.len()
                ))
            }
        }
        other => Err(format!("unknown codec {other}")),
    }
}

/// Claimed sizes above this are checked by [`decoded_len`] before decoding.
const CHECK_DECODED_LEN_FROM: usize = 1 << 20;

/// What an LZ4 block decodes to, from its sequences alone (no output is
/// written); `None` if it is malformed. A sequence is a token (literal and
/// match length nibbles, 15 meaning more bytes follow), its literals, then,
/// unless it is the last, a 2-byte offset and the match length (4 more).
fn decoded_len(block: &[u8]) -> Option<usize> {
    let length = |at: &mut usize, nibble: u8| -> Option<usize> {
        let mut n = usize::from(nibble);
        if nibble == 15 {
            loop {
                let byte = *block.get(*at)?;
                *at += 1;
                n = n.checked_add(usize::from(byte))?;
                if byte != 255 {
                    break;
                }
            }
        }
        Some(n)
    };
    let (mut at, mut out) = (0usize, 0usize);
    while at < block.len() {
        let token = block[at];
        at += 1;
        let literals = length(&mut at, token >> 4)?;
        at = at.checked_add(literals).filter(|&end| end <= block.len())?;
        out = out.checked_add(literals)?;
        if at == block.len() {
            return Some(out);
        }
        at = at.checked_add(2).filter(|&end| end <= block.len())?;
        out = out.checked_add(length(&mut at, token & 15)?.checked_add(4)?)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_incompressible_payloads_stay_raw() {
        assert_eq!(encode(b"{\"role\":\"user\"}").1, CODEC_RAW);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                // xorshift64: bytes with nothing for LZ4 to find.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u8
            })
            .collect();
        assert_eq!(encode(&noise).1, CODEC_RAW);
        let text = "the same words again and again. ".repeat(40);
        let (packed, codec) = encode(text.as_bytes());
        assert_eq!(codec, CODEC_LZ4);
        assert_eq!(decode(&packed, codec, text.len()).unwrap(), text.as_bytes());
        assert!(decode(&packed, codec, text.len() + 1).is_err());
        assert_eq!(decoded_len(&packed), Some(text.len()));
        let big = "a long run of one letter ".repeat(100_000);
        let packed = lz4_flex::block::compress(big.as_bytes());
        assert_eq!(decoded_len(&packed), Some(big.len()));
        assert_eq!(
            decode(&packed, CODEC_LZ4, big.len()).unwrap(),
            big.as_bytes()
        );
        // A claim far past what the block holds is refused before decoding.
        assert!(decode(&packed, CODEC_LZ4, u32::MAX as usize).is_err());
        assert!(decode(big.as_bytes(), CODEC_LZ4, 255 * big.len()).is_err());
        assert!(decode(&packed[..packed.len() / 2], codec, text.len()).is_err());
    }
}
