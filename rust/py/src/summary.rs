//! The summary guard and the name scan (`context_core::summary`) for
//! `context_core.summarize`.

use context_core::summary::{Verdict, check_reply, check_sections, named, occurs};
use pyo3::prelude::*;

use crate::text::text as text_of;
use crate::tokenizer::PyTokenizer;

/// `(summary, tokens, None)` if `reply` passes the guard, else
/// `(None, 0, reason)`. `covered` is the text the summary may name,
/// `max_tokens` its bound, counted with `tokenizer`.
#[pyfunction]
pub fn _check_summary(
    reply: &Bound<'_, PyAny>,
    covered: &Bound<'_, PyAny>,
    max_tokens: usize,
    tokenizer: &PyTokenizer,
) -> PyResult<(Option<String>, usize, Option<String>)> {
    let (reply, covered) = (text_of(reply, "reply")?, text_of(covered, "covered")?);
    let inner = tokenizer.inner();
    Ok(
        match check_reply(&reply, &covered, max_tokens, |t, limit| {
            inner.count_up_to(t, limit)
        }) {
            Verdict::Kept { body, tokens } => (Some(body.to_owned()), tokens, None),
            Verdict::Rejected(reason) => (None, 0, Some(reason)),
        },
    )
}

/// `(tool call ids, paths and file names)` named in `text`.
#[pyfunction]
pub fn _named(text: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, Vec<String>)> {
    let value = text_of(text, "text")?;
    let (ids, files) = named(&value);
    Ok((
        ids.into_iter().map(str::to_owned).collect(),
        files.into_iter().map(str::to_owned).collect(),
    ))
}

/// Whether `value` occurs in `text` as a whole (not inside a longer run of
/// ASCII letters, digits and underscores).
#[pyfunction]
pub fn _occurs(value: &Bound<'_, PyAny>, text: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(occurs(&text_of(value, "value")?, &text_of(text, "text")?))
}

/// `None` if `text` has every section heading once, in order, each followed
/// by something; else what is wrong.
#[pyfunction]
pub fn _check_sections(text: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    Ok(check_sections(&text_of(text, "text")?))
}
