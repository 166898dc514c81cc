//! `context_core.Sanitizer`: the funnel's Python face. The core decides
//! (a [`Plan`] of references); this module turns the plan into Python objects,
//! reusing the caller's messages, blocks and tool calls wherever they are kept.

use std::borrow::Cow;

use context_core::sanitize::{
    BlockRef, BuiltMessage, CallRef, Change, DEFAULT_ERROR_PATTERNS, DEFAULT_MAX_PATTERN_CHARS,
    DEFAULT_PLACEHOLDER_PATTERNS, OnInvalid, Options, OutContent, OutMessage, Patterns, Plan,
    Provider, Sanitizer, TEXT_SEPARATOR, is_blank_text_part, legacy_call_id,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

use crate::answered::{Answered, Lookup, Verified};
use crate::errors::{CoreError, invalid_input, invalid_type};

use crate::json::PyJson;
use crate::text::{as_count, sequence, text};

/// One change the funnel made to a history.
#[pyclass(frozen, eq, name = "Change", module = "context_core.sanitize", get_all)]
#[derive(PartialEq)]
pub struct PyChange {
    /// 1 (drop), 2 (merge), 3 (orphans) or 4 (merge again, provider rules).
    pub(crate) stage: u8,
    /// The input message concerned; `None` for an inserted message.
    pub(crate) index: Option<usize>,
    /// A short code such as `"drop_placeholder"` or `"merge"` (borrowed from
    /// the core; owned only when unpickled).
    pub(crate) action: Cow<'static, str>,
    reason: String,
}

/// A change's constructor arguments: `(stage, index, action, reason)`.
type ChangeFields = (u8, Option<usize>, String, String);

impl PyChange {
    /// The same change, its message `by` further on.
    pub(crate) fn shifted(&self, by: usize) -> Self {
        Self {
            stage: self.stage,
            index: self.index.map(|i| i + by),
            action: self.action.clone(),
            reason: self.reason.clone(),
        }
    }
}

#[pymethods]
impl PyChange {
    /// Made by the funnel; callable so that a change pickles and copies.
    #[new]
    fn new(stage: u8, index: Option<usize>, action: String, reason: String) -> Self {
        Self {
            stage,
            index,
            action: Cow::Owned(action),
            reason,
        }
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyAny>, ChangeFields) {
        let change = slf.get();
        let fields = (
            change.stage,
            change.index,
            change.action.to_string(),
            change.reason.clone(),
        );
        (slf.get_type().into_any(), fields)
    }

    fn __repr__(&self) -> String {
        let index = self
            .index
            .map_or_else(|| "None".to_owned(), |i| i.to_string());
        format!(
            "Change(stage={}, index={index}, action={:?}, reason={:?})",
            self.stage, self.action, self.reason
        )
    }
}

impl From<Change> for PyChange {
    fn from(change: Change) -> Self {
        Self {
            stage: change.stage,
            index: change.index,
            action: Cow::Borrowed(change.action),
            reason: change.reason,
        }
    }
}

/// What `sanitize` returns.
#[pyclass(
    frozen,
    name = "SanitizeResult",
    module = "context_core.sanitize",
    get_all
)]
pub struct PySanitizeResult {
    /// The repaired messages (unchanged ones are the caller's own objects).
    pub(crate) messages: Py<PyList>,
    /// Anthropic: the text lifted out of system messages (a str, or a list of
    /// text blocks when any had blocks); `None` when there was none.
    pub(crate) system: Py<PyAny>,
    /// Every change, in the order the stages made them.
    pub(crate) changes: Vec<Py<PyChange>>,
}

#[pymethods]
impl PySanitizeResult {
    /// Whether anything changed.
    #[getter]
    fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SanitizeResult({} messages, {} changes)",
            self.messages.bind(py).len(),
            self.changes.len()
        )
    }
}

/// A configured sanitize funnel; its patterns compile once.
#[pyclass(frozen, name = "Sanitizer", module = "context_core")]
pub struct PySanitizer {
    inner: Sanitizer,
    /// Histories answered lately: the next turn's runs from its last turn
    /// on (see `answered`).
    answered: Answered,
}

#[pymethods]
impl PySanitizer {
    #[new]
    #[pyo3(signature = (
        provider = None,
        *,
        convert_function = None,
        on_invalid = None,
        placeholder_patterns = None,
        error_patterns = None,
        max_pattern_chars = None,
        first_user_text = None,
    ),
    // The defaults as the stub and the docs give them (None also means each).
    text_signature = "(provider='openai', *, convert_function=False, on_invalid='raise', \
        placeholder_patterns=None, error_patterns=None, max_pattern_chars=None, first_user_text=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        provider: Option<&Bound<'_, PyAny>>,
        convert_function: Option<&Bound<'_, PyAny>>,
        on_invalid: Option<&Bound<'_, PyAny>>,
        placeholder_patterns: Option<&Bound<'_, PyAny>>,
        error_patterns: Option<&Bound<'_, PyAny>>,
        max_pattern_chars: Option<&Bound<'_, PyAny>>,
        first_user_text: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let provider = match provider {
            Some(p) if !p.is_none() => {
                Provider::from_name(&text(p, "provider")?).map_err(CoreError)?
            }
            _ => Provider::OpenAi,
        };
        let mut options = Options::new(provider);
        if let Some(flag) = convert_function.filter(|f| !f.is_none()) {
            if !flag.is_instance_of::<PyBool>() {
                return Err(invalid_type(format!(
                    "convert_function must be bool, not {}",
                    crate::text::type_name(flag)
                )));
            }
            options.convert_function = flag.is_truthy()?;
        }
        if let Some(mode) = on_invalid.filter(|m| !m.is_none()) {
            options.on_invalid = match text(mode, "on_invalid")?.as_ref() {
                "raise" => OnInvalid::Raise,
                "drop" => OnInvalid::Drop,
                other => {
                    return Err(invalid_input(format!(
                        "on_invalid must be \"raise\" or \"drop\", got {other:?}"
                    )));
                }
            };
        }
        if let Some(first) = first_user_text.filter(|f| !f.is_none()) {
            options.first_user_text = text(first, "first_user_text")?.into_owned();
        }
        let placeholders = patterns_arg(
            placeholder_patterns,
            "placeholder_patterns",
            DEFAULT_PLACEHOLDER_PATTERNS,
        )?;
        let errors = patterns_arg(error_patterns, "error_patterns", DEFAULT_ERROR_PATTERNS)?;
        let max_chars = match max_pattern_chars.filter(|m| !m.is_none()) {
            Some(max) => as_count(max, "max_pattern_chars")?,
            None => DEFAULT_MAX_PATTERN_CHARS,
        };
        let patterns = Patterns::new(&placeholders, &errors, max_chars).map_err(CoreError)?;
        Ok(Self {
            inner: Sanitizer::new(options, patterns).map_err(CoreError)?,
            answered: Answered::new(provider == Provider::Anthropic),
        })
    }

    /// `"openai"` or `"anthropic"`.
    #[getter]
    fn provider(&self) -> &'static str {
        match self.inner.options().provider {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// Repair `messages` for this provider; the input is never mutated.
    fn sanitize(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<PySanitizeResult> {
        let items = sequence(messages, "messages")?;
        self.sanitize_items(py, &items, Verified::default())
    }

    fn __call__(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<PySanitizeResult> {
        self.sanitize(py, messages)
    }

    fn __repr__(&self) -> String {
        format!("Sanitizer({:?})", self.provider())
    }
}

impl PySanitizer {
    /// The funnel's answer for `items`, those `verified` vouched for (see
    /// [`Verified`]).
    pub(crate) fn sanitize_items(
        &self,
        py: Python<'_>,
        items: &[Bound<'_, PyAny>],
        verified: Verified<'_>,
    ) -> PyResult<PySanitizeResult> {
        let blocked_at = match self.answered.extension(py, items, verified) {
            Lookup::Extend(extension) => {
                let tail = &items[extension.from..];
                let views: Vec<PyJson<'_>> = tail.iter().cloned().map(PyJson).collect();
                // An error in the tail: the whole funnel says it, with the right index.
                if let Ok(plan) = self.inner.sanitize_after(&views, &extension.called) {
                    let tail_answer = build_result(py, tail, plan)?;
                    if let Some(answer) =
                        self.answered
                            .finish(py, items, *extension, &tail_answer, verified)?
                    {
                        return Ok(answer);
                    }
                }
                None
            }
            Lookup::Blocked(at) => at,
            Lookup::None => None,
        };
        let views: Vec<PyJson<'_>> = items.iter().cloned().map(PyJson).collect();
        let plan = self.inner.sanitize(&views).map_err(CoreError)?;
        let answer = self
            .answered
            .reuse_copies(py, items, build_result(py, items, plan)?);
        if self.answered.seen_before(items) {
            let tail_answer = |from: usize, called: &[String]| {
                let tail = &items[from..];
                let views: Vec<PyJson<'_>> = tail.iter().cloned().map(PyJson).collect();
                let plan = self.inner.sanitize_after(&views, called).ok()?;
                build_result(py, tail, plan).ok()
            };
            self.answered
                .remember(py, items, &answer, blocked_at, tail_answer, verified);
        }
        Ok(answer)
    }
}

fn patterns_arg(
    value: Option<&Bound<'_, PyAny>>,
    what: &str,
    default: &[&str],
) -> PyResult<Vec<String>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(default.iter().map(|p| (*p).to_owned()).collect()),
        Some(value) => sequence(value, what)?
            .iter()
            .enumerate()
            .map(|(i, p)| Ok(text(p, &format!("{what}[{i}]"))?.into_owned()))
            .collect(),
    }
}

fn build_result(
    py: Python<'_>,
    inputs: &[Bound<'_, PyAny>],
    plan: Plan,
) -> PyResult<PySanitizeResult> {
    let messages = PyList::empty(py);
    for message in &plan.messages {
        match message {
            OutMessage::Original(i) => messages.append(&inputs[*i])?,
            OutMessage::Built(built) => messages.append(build_message(py, inputs, built)?)?,
        }
    }
    let system = build_system(py, inputs, &plan.system)?;
    let changes = plan
        .changes
        .into_iter()
        .map(|change| Py::new(py, PyChange::from(change)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PySanitizeResult {
        messages: messages.unbind(),
        system,
        changes,
    })
}

fn build_message<'py>(
    py: Python<'py>,
    inputs: &[Bound<'py, PyAny>],
    built: &BuiltMessage,
) -> PyResult<Bound<'py, PyDict>> {
    let message = match built.base {
        Some(base) => inputs[base].cast::<PyDict>()?.copy()?,
        None => PyDict::new(py),
    };
    if let Some(role) = built.role {
        message.set_item("role", role)?;
    }
    if let Some(content) = &built.content {
        message.set_item("content", build_content(py, inputs, content)?)?;
    }
    if let Some(calls) = &built.tool_calls {
        if calls.is_empty() {
            if message.contains("tool_calls")? {
                message.del_item("tool_calls")?;
            }
        } else {
            let list = PyList::empty(py);
            for call in calls {
                list.append(build_call(py, inputs, *call)?)?;
            }
            message.set_item("tool_calls", list)?;
        }
    }
    if let Some(id) = &built.tool_call_id {
        message.set_item("tool_call_id", id)?;
    }
    for key in &built.remove {
        if message.contains(*key)? {
            message.del_item(*key)?;
        }
    }
    Ok(message)
}

fn field<'py>(object: &Bound<'py, PyAny>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    object.get_item(key)
}

fn build_content<'py>(
    py: Python<'py>,
    inputs: &[Bound<'py, PyAny>],
    content: &OutContent,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match content {
        OutContent::Null => py.None().into_bound(py),
        OutContent::Literal(text) => PyString::new(py, text).into_any(),
        OutContent::Texts(messages) => match &messages[..] {
            [single] => field(&inputs[*single], "content")?,
            many => {
                let parts = many
                    .iter()
                    .map(|&m| field(&inputs[m], "content"))
                    .collect::<PyResult<Vec<_>>>()?;
                PyString::new(py, TEXT_SEPARATOR).call_method1("join", (parts,))?
            }
        },
        OutContent::Blocks(blocks) => {
            let list = PyList::empty(py);
            for block in blocks {
                list.append(build_block(py, inputs, *block)?)?;
            }
            list.into_any()
        }
    })
}

fn build_block<'py>(
    py: Python<'py>,
    inputs: &[Bound<'py, PyAny>],
    block: BlockRef,
) -> PyResult<Bound<'py, PyAny>> {
    match block {
        BlockRef::Block { message, block } => field(&inputs[message], "content")?.get_item(block),
        BlockRef::TrimmedResult { message, block } => {
            let original = field(&inputs[message], "content")?.get_item(block)?;
            let result = original.cast::<PyDict>()?.copy()?;
            let parts = PyList::empty(py);
            for part in field(&original, "content")?.try_iter()? {
                let part = part?;
                if !is_blank_text_part(&PyJson(part.clone())) {
                    parts.append(part)?;
                }
            }
            if parts.is_empty() {
                result.set_item("content", PyString::new(py, ""))?;
            } else {
                result.set_item("content", parts)?;
            }
            Ok(result.into_any())
        }
        BlockRef::TextOf { message } => {
            let text_block = PyDict::new(py);
            text_block.set_item("type", "text")?;
            text_block.set_item("text", field(&inputs[message], "content")?)?;
            Ok(text_block.into_any())
        }
    }
}

fn build_call<'py>(
    py: Python<'py>,
    inputs: &[Bound<'py, PyAny>],
    call: CallRef,
) -> PyResult<Bound<'py, PyAny>> {
    match call {
        CallRef::Call { message, call } => field(&inputs[message], "tool_calls")?.get_item(call),
        CallRef::Legacy { message } => {
            let tool_call = PyDict::new(py);
            tool_call.set_item("id", legacy_call_id(message))?;
            tool_call.set_item("type", "function")?;
            tool_call.set_item("function", field(&inputs[message], "function_call")?)?;
            Ok(tool_call.into_any())
        }
    }
}

/// The lifted system contents: one string when they are all strings, else a
/// list of text blocks; `None` when there are none.
fn build_system(
    py: Python<'_>,
    inputs: &[Bound<'_, PyAny>],
    parts: &[OutContent],
) -> PyResult<Py<PyAny>> {
    if parts.is_empty() {
        return Ok(py.None());
    }
    if parts.iter().all(|p| matches!(p, OutContent::Texts(_))) {
        let texts = parts
            .iter()
            .flat_map(|p| match p {
                OutContent::Texts(messages) => messages.clone(),
                _ => Vec::new(),
            })
            .map(|m| field(&inputs[m], "content"))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(PyString::new(py, TEXT_SEPARATOR)
            .call_method1("join", (texts,))?
            .unbind());
    }
    let blocks = PyList::empty(py);
    for part in parts {
        match part {
            OutContent::Texts(messages) => {
                for &m in messages {
                    blocks.append(build_block(py, inputs, BlockRef::TextOf { message: m })?)?;
                }
            }
            OutContent::Blocks(refs) => {
                for block in refs {
                    blocks.append(build_block(py, inputs, *block)?)?;
                }
            }
            OutContent::Null | OutContent::Literal(_) => {}
        }
    }
    Ok(blocks.into_any().unbind())
}
