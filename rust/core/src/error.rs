//! Errors of the core, as plain data; the binding maps each variant to a Python
//! exception (a subclass of `context_core.ContextCoreError` and the matching built-in).

//!
//! A leaf: each variant carries what its message names (the known encodings,
//! say), so this module imports none of the modules that raise it. Messages
//! name no language's syntax; the binding adds its own hints (a keyword to
//! pass, say) after them.

use std::fmt;

use crate::limits::{MAX_DEPTH, REPLY_PRIMING};

/// Everything the core can refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// An encoding name that is not one of `known` (`Encoding::ALL`).
    UnknownEncoding {
        name: String,
        known: Vec<&'static str>,
    },
    /// A model name that neither the exact table nor a prefix rule knows;
    /// `known` lists both (a prefix rule with a trailing `*`).
    UnknownModel { model: String, known: Vec<String> },
    /// A token id that is neither in the vocabulary nor a special token.
    InvalidToken { token: u64 },
    /// `truncate` was asked to fit a marker that alone exceeds the cap.
    MarkerTooLong {
        marker_tokens: usize,
        max_tokens: usize,
    },
    /// A value in a message or tool schema has the wrong type.
    WrongType {
        path: String,
        expected: &'static str,
        found: String,
    },
    /// A required field of a message or tool schema is absent.
    MissingField { path: String },
    /// Containers nested deeper than [`MAX_DEPTH`] (a reference cycle, usually).
    TooDeep { path: String },
    /// What every policy must keep (system, pinned, the turn in progress) is over the budget.
    OverBudget {
        system: usize,
        pinned: usize,
        current: usize,
        budget: usize,
    },
    /// A value of the right type that cannot be used (e.g. an integer too long
    /// to write out, as Python's `json.dumps` also refuses).
    InvalidValue { path: String, reason: String },
    /// A message log's file is damaged at `offset`.
    LogCorrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    /// Another writer holds the message log.
    LogLocked { path: String },
    /// The message log was closed, or is open read-only for a write.
    LogClosed { reason: &'static str },
    /// A write through a log handle inherited across `fork()`: only the
    /// process that opened it may write.
    LogForked { opened_by: u32, process: u32 },
    /// No message log at the path.
    LogNotFound { path: String },
    /// A sequence number the log does not hold.
    LogIndex { seq: i64, len: u64 },
    /// A read or write of a log's file failed (a full disk, permissions...).
    Storage {
        path: String,
        action: &'static str,
        message: String,
        /// The OS's error number, where the OS gave one.
        errno: Option<i32>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Prefix the location of a message/schema error with `outer` (e.g. `messages[3]`).
    #[must_use]
    pub fn within(self, outer: &str) -> Self {
        let join = |path: String| {
            if path.is_empty() {
                outer.to_owned()
            } else if path.starts_with('[') {
                format!("{outer}{path}")
            } else {
                format!("{outer}.{path}")
            }
        };
        match self {
            Error::WrongType {
                path,
                expected,
                found,
            } => Error::WrongType {
                path: join(path),
                expected,
                found,
            },
            Error::MissingField { path } => Error::MissingField { path: join(path) },
            Error::TooDeep { path } => Error::TooDeep { path: join(path) },
            Error::InvalidValue { path, reason } => Error::InvalidValue {
                path: join(path),
                reason,
            },
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownEncoding { name, known } => write!(
                f,
                "unknown encoding {name:?}; known encodings: {}",
                known.join(", ")
            ),
            Error::UnknownModel { model, known } => {
                write!(
                    f,
                    "unknown model {model:?}; known models: {}",
                    known.join(", ")
                )
            }
            Error::InvalidToken { token } => {
                write!(f, "token id {token} is not in this encoding's vocabulary")
            }
            Error::MarkerTooLong {
                marker_tokens,
                max_tokens,
            } => write!(
                f,
                "the truncation marker alone takes {marker_tokens} tokens, more than \
                 the cap of {max_tokens}"
            ),
            Error::WrongType {
                path,
                expected,
                found,
            } => write!(f, "{path}: expected {expected}, got {found}"),
            Error::MissingField { path } => write!(f, "{path}: required field is missing"),
            Error::InvalidValue { path, reason } => write!(f, "{path}: {reason}"),
            Error::OverBudget {
                system,
                pinned,
                current,
                budget,
            } => write!(
                f,
                "what must be kept does not fit: system {system} + pinned {pinned} + turn in \
                 progress {current} + reply priming {REPLY_PRIMING} tokens > budget {budget}"
            ),
            Error::LogCorrupt {
                file,
                offset,
                reason,
            } => write!(f, "{file}: damaged at byte {offset}: {reason}"),
            Error::LogLocked { path } => write!(f, "{path}: another writer holds this message log"),
            Error::LogClosed { reason } => write!(f, "{reason}"),
            Error::LogForked { opened_by, process } => write!(
                f,
                "this message log was opened for writing by process {opened_by}; process \
                 {process} (a child of a fork) cannot write through it: open the log anew \
                 in this process (after the parent closes it), or read it"
            ),
            Error::LogNotFound { path } => write!(f, "{path}: no message log here"),
            Error::LogIndex { seq, len } => {
                write!(f, "node {seq} is not in this log ({len} nodes)")
            }
            Error::Storage {
                path,
                action,
                message,
                ..
            } => write!(f, "{path}: could not {action}: {message}"),
            Error::TooDeep { path } => write!(
                f,
                "{}: nested more than {} levels deep (a reference cycle?)",
                abbreviate(path),
                MAX_DEPTH
            ),
        }
    }
}

impl std::error::Error for Error {}

/// The start of a path that runs through hundreds of nesting levels.
fn abbreviate(path: &str) -> String {
    const KEEP: usize = 100;
    if path.len() <= KEEP {
        return path.to_owned();
    }
    let mut end = KEEP;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core speaks no language's syntax: keywords to pass are the binding's to add.
    #[test]
    fn messages_name_no_keyword_syntax() {
        let errors = [
            Error::UnknownModel {
                model: "m".into(),
                known: vec!["gpt-4o*".into()],
            },
            Error::MarkerTooLong {
                marker_tokens: 9,
                max_tokens: 2,
            },
            Error::LogLocked { path: "p".into() },
            Error::LogForked {
                opened_by: 1,
                process: 2,
            },
            Error::LogNotFound { path: "p".into() },
        ];
        for error in errors {
            let text = error.to_string();
            for syntax in ["=True", "=False", "=None", "= ", "=\""] {
                assert!(!text.contains(syntax), "{text}");
            }
        }
    }
}
