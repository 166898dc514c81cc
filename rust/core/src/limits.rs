//! Fixed numbers that several modules (and their errors) name: a leaf, so
//! that `error` can quote them without importing the modules that use it.

/// Containers nested deeper than this are refused (this also stops reference cycles).
pub const MAX_DEPTH: usize = 256;

/// Every reply is primed with `<|start|>assistant<|message|>`: tokens every
/// chat request costs once, whatever its messages.
pub const REPLY_PRIMING: usize = 3;
