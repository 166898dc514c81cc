//! `context_core`'s Rust core: exact token counting for the OpenAI encodings and
//! chat accounting, the ground every budget decision stands on.
//!
//! No Python here: `rust/py` binds this crate, converting at the boundary.

pub mod ahead;
mod cache;
mod chat;
pub mod document;
pub mod embed;
mod encoding;
mod engine;
pub mod entities;
mod error;
mod json;
pub mod keywords;
mod limits;
pub mod log;
mod parallel;
pub mod pretokenize;
pub mod ranking;
pub mod sanitize;
pub mod select;
pub mod summary;
pub mod tags;
#[cfg(test)]
mod testing;
mod tokenizer;
pub mod vectors;

pub use cache::{
    CacheInfo, DEFAULT_CAPACITY as DEFAULT_CACHE_CAPACITY, MIN_CACHED_BYTES, text_key,
};
pub use chat::{
    ANTHROPIC_IMAGE_TOKENS, IMAGE_TOKENS, IMAGE_TOKENS_LOW, MessageFields, REPLY_PRIMING,
    TOKENS_PER_MESSAGE, TOKENS_PER_NAME, TOKENS_PER_TOOL_CALL,
};
pub use encoding::{Encoding, known_models};
pub use error::{Error, Result};
pub use json::{Json, JsonValue, Kind as JsonKind, MAX_DEPTH};
pub use parallel::PARALLEL_MIN_BYTES;
pub use tokenizer::{DROPPED_PLACEHOLDER, Tokenizer};
