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
        assert!(decode(&packed[..packed.len() / 2], codec, text.len()).is_err());
    }
}
