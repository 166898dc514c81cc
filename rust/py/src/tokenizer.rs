//! `context_core.Tokenizer`: the Python face of `context_core::Tokenizer`.

use std::borrow::Cow;

use context_core::{Encoding, JsonValue, Tokenizer};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyInt, PyString};

use crate::errors::{CoreError, invalid_input, invalid_type};
use crate::json::PyJson;
use crate::text::{as_count, as_str, sequence, str_text, text, type_name};

/// Texts at least this long are counted with the GIL released, so other Python
/// threads run meanwhile; below it the release costs more than it frees.
const RELEASE_GIL_BYTES: usize = 16 * 1024;

/// Exact token counts for one OpenAI encoding.
#[pyclass(frozen, name = "Tokenizer", module = "context_core")]
pub struct PyTokenizer {
    inner: Tokenizer,
}

#[pyclass(frozen, name = "CacheInfo", module = "context_core.tokens", get_all)]
pub struct PyCacheInfo {
    hits: u64,
    misses: u64,
    size: usize,
    capacity: usize,
}

impl PyTokenizer {
    /// The core tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

#[pymethods]
impl PyCacheInfo {
    fn __repr__(&self) -> String {
        format!(
            "CacheInfo(hits={}, misses={}, size={}, capacity={})",
            self.hits, self.misses, self.size, self.capacity
        )
    }
}

fn encoding_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Encoding> {
    let name = text(obj, what)?;
    Ok(Encoding::from_name(&name).map_err(CoreError)?)
}

/// Run `f` with the GIL released when `bytes` is large enough to be worth it.
fn maybe_detach<T: Send>(py: Python<'_>, bytes: usize, f: impl FnOnce() -> T + Send) -> T {
    if bytes >= RELEASE_GIL_BYTES {
        py.detach(f)
    } else {
        f()
    }
}

#[pymethods]
impl PyTokenizer {
    #[new]
    // The default as the stub and the docs give it (None also means it).
    #[pyo3(signature = (encoding = None), text_signature = "(encoding='o200k_base')")]
    fn new(encoding: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let encoding = match encoding {
            Some(obj) => encoding_of(obj, "encoding")?,
            None => Encoding::O200kBase,
        };
        Ok(Self {
            inner: Tokenizer::new(encoding),
        })
    }

    /// The tokenizer of an OpenAI model; `fallback` names the encoding to use
    /// for a model the table does not know (otherwise that is an error).
    #[staticmethod]
    #[pyo3(signature = (model, *, fallback = None))]
    fn for_model(model: &Bound<'_, PyAny>, fallback: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let model = text(model, "model")?;
        let encoding = match Encoding::for_model(&model) {
            Ok(encoding) => encoding,
            Err(error) => match fallback {
                Some(fallback) if !fallback.is_none() => encoding_of(fallback, "fallback")?,
                _ => return Err(CoreError(error).into()),
            },
        };
        Ok(Self {
            inner: Tokenizer::new(encoding),
        })
    }

    /// The encoding's name, e.g. `"o200k_base"`.
    #[getter]
    fn name(&self) -> &'static str {
        self.inner.encoding().name()
    }

    fn __repr__(&self) -> String {
        format!("Tokenizer({:?})", self.inner.encoding().name())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyTokenizer>()
            .is_ok_and(|o| o.get().inner.encoding() == self.inner.encoding())
    }

    fn __hash__(&self) -> u64 {
        self.inner.encoding() as u64
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyAny>, (&'static str,)) {
        (
            slf.get_type().into_any(),
            (slf.get().inner.encoding().name(),),
        )
    }

    /// Token ids of `text`; special-token look-alikes are ordinary text.
    fn encode(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        let string = as_str(text, "text")?;
        let text = str_text(string);
        let tokenizer = self.inner;
        Ok(maybe_detach(py, text.len(), || tokenizer.encode(&text)))
    }

    /// The text of `tokens` (invalid UTF-8 at the edges becomes U+FFFD).
    fn decode(&self, tokens: &Bound<'_, PyAny>) -> PyResult<String> {
        let ids = token_ids(tokens)?;
        let bytes = self.inner.decode_bytes(&ids).map_err(CoreError)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes of `tokens`.
    fn decode_bytes<'py>(
        &self,
        py: Python<'py>,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let ids = token_ids(tokens)?;
        let bytes = self.inner.decode_bytes(&ids).map_err(CoreError)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Token count of `text`; with `limit`, stops once the count passes it and
    /// returns `limit + 1`.
    #[pyo3(signature = (text, limit = None))]
    fn count(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let string = as_str(text, "text")?;
        let text = str_text(string);
        let tokenizer = self.inner;
        match limit {
            None => Ok(maybe_detach(py, text.len(), || tokenizer.count(&text))),
            Some(limit) if limit.is_none() => {
                Ok(maybe_detach(py, text.len(), || tokenizer.count(&text)))
            }
            Some(limit) => {
                let limit = as_count(limit, "limit")?;
                Ok(maybe_detach(py, text.len(), || {
                    tokenizer.count_up_to(&text, limit)
                }))
            }
        }
    }

    /// `count(text)` through this encoding's shared count cache: for a text
    /// counted again whenever it comes back, as a memory a search returns
    /// (the store and the session each count the memories they keep).
    fn _count_cached(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<usize> {
        let string = as_str(text, "text")?;
        let text = str_text(string);
        let tokenizer = self.inner;
        Ok(maybe_detach(py, text.len(), || {
            tokenizer.count_cached(&text)
        }))
    }

    /// Token counts of many texts as a numpy int64 array, counted on all cores
    /// with the GIL released once for the whole batch.
    fn count_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let items = sequence(texts, "texts")?;
        let mut strings = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            strings.push(as_str(item, &format!("texts[{i}]"))?);
        }
        let texts: Vec<Cow<'_, str>> = strings.iter().map(|s| str_text(s)).collect();
        let refs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        let bytes: usize = refs.iter().map(|t| t.len()).sum();
        let tokenizer = self.inner;
        let counts = maybe_detach(py, bytes, || tokenizer.count_many(&refs));
        int64_array(py, &counts)
    }

    /// `text` cut to at most `max_tokens` tokens on a token boundary, with
    /// `marker` (its `{dropped}` replaced by the number of tokens cut) inside the cap.
    #[pyo3(signature = (text, max_tokens, marker = None))]
    fn truncate(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        max_tokens: &Bound<'_, PyAny>,
        marker: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let string = as_str(text, "text")?;
        let max_tokens = as_count(max_tokens, "max_tokens")?;
        let marker = match marker {
            Some(m) if !m.is_none() => Some(crate::text::text(m, "marker")?),
            _ => None,
        };
        let body = str_text(string);
        let tokenizer = self.inner;
        // The whole text's count, if a cut needs it, through the cache under
        // the key remembered for this string object.
        let key = (body.len() > max_tokens && body.len() >= context_core::MIN_CACHED_BYTES)
            .then(|| crate::key_memo::key_of(string, &body));
        let total = |text: &str| match key {
            Some(key) => tokenizer.count_keyed(text, key),
            None => tokenizer.count_cached(text),
        };
        let cut = maybe_detach(py, body.len(), || {
            tokenizer
                .truncate_with_count(&body, max_tokens, marker.as_deref(), || total(&body))
                .map(|(cut, _)| cut)
        })
        .map_err(CoreError)?;
        Ok(match cut {
            // It fits: hand back the caller's own object (even one holding lone
            // surrogates; only a cut text is built from the repaired copy).
            Cow::Borrowed(_) => string.clone().into_any().unbind(),
            Cow::Owned(cut) => PyString::new(py, &cut).into_any().unbind(),
        })
    }

    /// Tokens of `parts` joined by blank lines, from their cached counts;
    /// `None`: count the joined text whole (`context_core::Tokenizer::count_joined`).
    #[allow(clippy::needless_pass_by_value)] // pyo3 hands over an owned Vec
    fn _count_joined(&self, parts: Vec<Bound<'_, PyString>>) -> Option<usize> {
        let texts: Vec<(Cow<'_, str>, Option<u128>)> = parts
            .iter()
            .map(|part| (str_text(part), PyJson(part.clone().into_any()).text_key()))
            .collect();
        let borrowed: Vec<(&str, Option<u128>)> = texts
            .iter()
            .map(|(text, key)| (text.as_ref(), *key))
            .collect();
        self.inner.count_joined(&borrowed)
    }

    /// Tokens of one chat message (OpenAI or Anthropic format), without the
    /// reply priming.
    fn count_message(&self, message: &Bound<'_, PyAny>) -> PyResult<usize> {
        if !message.is_instance_of::<PyDict>() {
            return Err(invalid_type(format!(
                "message must be a dict, not {}",
                type_name(message)
            )));
        }
        Ok(self
            .inner
            .count_message(&PyJson(message.clone()))
            .map_err(CoreError)?)
    }

    /// Tokens of a request: every message, the reply priming, and `tools`.
    #[pyo3(signature = (messages, tools = None))]
    fn count_messages(
        &self,
        messages: &Bound<'_, PyAny>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let messages: Vec<PyJson<'_>> = sequence(messages, "messages")?
            .into_iter()
            .map(PyJson)
            .collect();
        let tools = match tools {
            Some(tools) if !tools.is_none() => Some(
                sequence(tools, "tools")?
                    .into_iter()
                    .map(PyJson)
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        Ok(self
            .inner
            .count_messages(&messages, tools.as_deref())
            .map_err(CoreError)?)
    }

    /// Tokens the API bills for tool schemas (OpenAI or Anthropic format).
    fn count_tools(&self, tools: &Bound<'_, PyAny>) -> PyResult<usize> {
        let tools: Vec<PyJson<'_>> = sequence(tools, "tools")?.into_iter().map(PyJson).collect();
        Ok(self.inner.count_tools(&tools).map_err(CoreError)?)
    }

    /// Hits, misses, size and capacity of this encoding's count cache.
    fn cache_info(&self) -> PyCacheInfo {
        let info = self.inner.cache_info();
        PyCacheInfo {
            hits: info.hits,
            misses: info.misses,
            size: info.size,
            capacity: info.capacity,
        }
    }

    /// Empty this encoding's count cache.
    fn cache_clear(&self) {
        self.inner.cache_clear();
    }

    /// Bound this encoding's count cache to `capacity` entries.
    fn set_cache_capacity(&self, capacity: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner
            .set_cache_capacity(as_count(capacity, "capacity")?);
        Ok(())
    }
}

/// Token ids from any sequence of integers (Python ints, numpy integers:
/// anything with `__index__`, but not bools), with errors naming the bad one.
fn token_ids(tokens: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let items = sequence(tokens, "tokens")?;
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let integral = !item.is_instance_of::<PyBool>()
            && (item.is_instance_of::<PyInt>() || item.hasattr(intern!(item.py(), "__index__"))?);
        if !integral {
            return Err(invalid_type(format!(
                "tokens[{i}] must be int, not {}",
                type_name(item)
            )));
        }
        let id = item.extract::<u32>().map_err(|_| {
            invalid_input(format!(
                "tokens[{i}]: token id {item} is not in this encoding's vocabulary"
            ))
        })?;
        ids.push(id);
    }
    Ok(ids)
}

static FROMBUFFER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `counts` as a writable numpy int64 array. One copy into a `bytearray` that
/// `numpy.frombuffer` then views; this avoids the `numpy` crate (and ndarray
/// with it) for a single conversion.
fn int64_array<'py>(py: Python<'py>, counts: &[u32]) -> PyResult<Bound<'py, PyAny>> {
    let bytes: Vec<u8> = counts
        .iter()
        .flat_map(|&n| i64::from(n).to_ne_bytes())
        .collect();
    let buffer = PyByteArray::new(py, &bytes);
    let frombuffer = FROMBUFFER.import(py, "numpy", "frombuffer")?;
    frombuffer.call1((buffer, "int64"))
}

/// `{token bytes: id}` of an encoding's ordinary tokens, for the pure-Python
/// reference to build its tiktoken encodings offline from the same vocabulary.
#[pyfunction]
pub fn _mergeable_ranks<'py>(
    py: Python<'py>,
    encoding: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let tokenizer = Tokenizer::new(encoding_of(encoding, "encoding")?);
    let ranks = PyDict::new(py);
    for (id, bytes) in tokenizer.vocabulary() {
        ranks.set_item(PyBytes::new(py, bytes), id)?;
    }
    Ok(ranks)
}

/// The encoding name for an OpenAI model (exact name first, then prefixes).
#[pyfunction]
pub fn encoding_name_for_model(model: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let model = text(model, "model")?;
    Ok(Encoding::for_model(&model).map_err(CoreError)?.name())
}
