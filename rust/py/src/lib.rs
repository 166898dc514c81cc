//! The extension module `context_core._core`: converts at the boundary and
//! calls the pyo3-free core in `rust/core`. The public, typed face is the
//! `context_core` package.

mod answered;
mod errors;
mod json;
mod key_memo;
mod log;
mod memory;
mod ranking;
mod read_runs;
mod sanitize;
mod seen;
mod select;
mod summary;
mod text;
mod tokenizer;

use pyo3::prelude::*;

#[pymodule]
mod _core {
    #[pymodule_export]
    use super::tokenizer::{_mergeable_ranks, PyCacheInfo, PyTokenizer, encoding_name_for_model};

    #[pymodule_export]
    use super::log::PyMessageLog;

    #[pymodule_export]
    use super::sanitize::{PyChange, PySanitizeResult, PySanitizer};

    #[pymodule_export]
    use super::select::{_analyze, PyAnalysis, PyTagger, PyToolResultCut};

    #[pymodule_export]
    use super::read_runs::_run_counts;

    #[pymodule_export]
    use super::memory::{
        _entities, _entities_many, _hash_embed, PyKeywordIndex, PyScanAhead, PyVectorIndex,
    };

    #[pymodule_export]
    use super::ranking::_rank_candidates;

    #[pymodule_export]
    use super::summary::{_check_sections, _check_summary, _named, _occurs};

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // At import, under the interpreter's lock: no fork can interleave.
        context_core::ahead::install();
        m.add(
            "ENCODINGS",
            context_core::Encoding::ALL
                .map(context_core::Encoding::name)
                .to_vec(),
        )?;
        m.add("MODELS", context_core::known_models())?;
        m.add("TOKENS_PER_MESSAGE", context_core::TOKENS_PER_MESSAGE)?;
        m.add("TOKENS_PER_NAME", context_core::TOKENS_PER_NAME)?;
        m.add("REPLY_PRIMING", context_core::REPLY_PRIMING)?;
        m.add("TOKENS_PER_TOOL_CALL", context_core::TOKENS_PER_TOOL_CALL)?;
        m.add("IMAGE_TOKENS", context_core::IMAGE_TOKENS)?;
        m.add("IMAGE_TOKENS_LOW", context_core::IMAGE_TOKENS_LOW)?;
        m.add(
            "ANTHROPIC_IMAGE_TOKENS",
            context_core::ANTHROPIC_IMAGE_TOKENS,
        )?;
        m.add("PDF_PAGE_TOKENS", context_core::document::PDF_PAGE_TOKENS)?;
        m.add("MIN_CACHED_BYTES", context_core::MIN_CACHED_BYTES)?;
        m.add("SUMMARY_PREFIX", context_core::log::SUMMARY_PREFIX)?;
        m.add("SEGMENT_PREFIX", context_core::log::SEGMENT_PREFIX)?;
        m.add("SEGMENTS_KEPT", context_core::log::SEGMENTS_KEPT)?;
        m.add("LOG_CACHED_BYTES", context_core::log::LOG_CACHED_BYTES)?;
        m.add(
            "PARALLEL_FACTS_FROM",
            context_core::log::PARALLEL_FACTS_FROM,
        )?;
        m.add("ECHO_MARKERS", context_core::summary::ECHO_MARKERS.to_vec())?;
        m.add("PARALLEL_MIN_BYTES", context_core::PARALLEL_MIN_BYTES)?;
        m.add(
            "DEFAULT_PLACEHOLDER_PATTERNS",
            context_core::sanitize::DEFAULT_PLACEHOLDER_PATTERNS.to_vec(),
        )?;
        m.add(
            "DEFAULT_ERROR_PATTERNS",
            context_core::sanitize::DEFAULT_ERROR_PATTERNS.to_vec(),
        )?;
        m.add(
            "DEFAULT_MAX_PATTERN_CHARS",
            context_core::sanitize::DEFAULT_MAX_PATTERN_CHARS,
        )?;
        m.add(
            "METADATA_KEYS",
            context_core::select::METADATA_KEYS.to_vec(),
        )?;
        m.add("TRUNCATION_MARKER", context_core::select::TRUNCATION_MARKER)?;
        m.add(
            "DEFAULT_CONSTRAINT_KEYWORDS",
            context_core::tags::DEFAULT_CONSTRAINT_KEYWORDS.to_vec(),
        )?;
        m.add(
            "DEFAULT_CONSTRAINT_OPENERS",
            context_core::tags::DEFAULT_CONSTRAINT_OPENERS.to_vec(),
        )?;
        m.add(
            "DEFAULT_PULSE_KEYWORDS",
            context_core::tags::DEFAULT_PULSE_KEYWORDS.to_vec(),
        )?;
        m.add(
            "DEFAULT_EVIDENCE_MARKERS",
            context_core::tags::DEFAULT_EVIDENCE_MARKERS.to_vec(),
        )?;
        m.add(
            "DEFAULT_LOG_MARKERS",
            context_core::tags::DEFAULT_LOG_MARKERS.to_vec(),
        )?;
        m.add(
            "DEFAULT_FIRST_USER_TEXT",
            context_core::sanitize::DEFAULT_FIRST_USER_TEXT,
        )?;
        Ok(())
    }
}
