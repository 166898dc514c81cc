//! `_MessageLog`: the Rust message log, bound. `context_core.log.MessageLog`
//! decodes payloads (`json.loads`) and views the headers with numpy.

use std::path::PathBuf;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use crate::select::{DEFAULT_TAGGER, WeightRow, weights_of};
use context_core::log::{
    AppendOptions, Durability, LOG_CACHED_BYTES, MessageLog, OpenOptions, Origin, Plan,
    PlanOptions, ViewPart, ViewSeqs, Window,
};
use context_core::select::Extras;
use context_core::tags::{Keywords, Tagger};
use context_core::{Encoding, Json, PARALLEL_MIN_BYTES, tags};
use pyo3::exceptions::{PyException, PyOverflowError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use crate::errors::{CoreError, invalid_input, invalid_type};
use crate::json::PyJson;
use crate::text::{as_str, sequence, text, type_name};

/// The default keyword lists: a log tags each message once, into its
/// header, and only a long text's tags are left in the default tagger's
/// cache (selection tags a long tool output again the turn it arrives;
/// caching every message would evict what selection reuses).
static LOG_TAGGER: LazyLock<Tagger> = LazyLock::new(|| {
    Tagger::new(&Keywords::default())
        .expect("the default keywords compile")
        .sharing_cache(&DEFAULT_TAGGER, LOG_CACHED_BYTES)
});

/// Batches of fewer messages are appended on the calling thread.
const PARALLEL_MIN_MESSAGES: usize = 128;

/// The log, bound; `context_core.MessageLog` subclasses it, so its plain
/// methods (`append` above all) are called with no Python frame between.
#[pyclass(frozen, subclass, name = "_MessageLog", module = "context_core._core")]
pub struct PyMessageLog {
    inner: Mutex<MessageLog>,
    /// Where the log was opened: a handle inherited across `fork()` must not
    /// wait for a lock a thread of the parent held at the fork.
    origin: Origin,
}

impl PyMessageLog {
    /// A large batch is copied out of Python and built on every core.
    /// `None` leaves it to the serial path: a small batch, a
    /// message only Python can read exactly, or one the log refuses (the
    /// serial path then reports it in Python's own terms, e.g. `int`).
    fn append_many_parallel(&self, views: &[PyJson<'_>]) -> PyResult<Option<(u64, u64)>> {
        if views.len() < PARALLEL_MIN_MESSAGES {
            return Ok(None);
        }
        let mut text_bytes = 0;
        let Some(copies) = views
            .iter()
            .map(|view| Json::copy_of(view, &mut text_bytes))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        if text_bytes < PARALLEL_MIN_BYTES {
            return Ok(None);
        }
        let copies: Vec<&Json<'static>> = copies.iter().collect();
        // The GIL stays held (the worker threads do not need it); a thread
        // waiting for the log's lock lets it go (see `log`).
        let mut log = self.log()?;
        let Ok(batch) = log.prepare_batch(&copies, text_bytes, &LOG_TAGGER) else {
            return Ok(None);
        };
        let range = log.append_prepared(batch).map_err(CoreError)?;
        Ok(Some((range.start, range.end)))
    }

    /// The log, locked, for a caller holding the GIL. A contended lock is
    /// waited for with the GIL let go: the holder may need the GIL before it
    /// lets the lock go (a cached Python name made on its first use, an
    /// error built by Python code, a finalizer the collector runs), and would
    /// wait for this thread forever.
    fn log(&self) -> PyResult<MutexGuard<'_, MessageLog>> {
        if !self.origin.is_elsewhere() {
            return Ok(Python::attach(|py| self.inner.lock_py_attached(py))
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
        Ok(self.locked().map_err(CoreError)?)
    }

    /// The log, locked. A panic never crosses into Python, so a poisoned
    /// lock only means another thread's call failed; the log's state is
    /// still consistent.
    fn locked(&self) -> context_core::Result<MutexGuard<'_, MessageLog>> {
        if !self.origin.is_elsewhere() {
            return Ok(self
                .inner
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
        // A child of a fork: a thread that held the lock at the fork does not
        // exist here, and never lets go. Refuse rather than hang.
        match self.inner.try_lock() {
            Ok(guard) => Ok(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(context_core::Error::LogForked {
                opened_by: self.origin.pid(),
                process: std::process::id(),
            }),
        }
    }
}

/// `message` as the log stores it: a dict as it is; an SDK object (one
/// with `model_dump`, such as OpenAI's `ChatCompletionMessage` or
/// Anthropic's `Message`) through `context_core.sdk_messages.message_of`.
fn sdk_message<'py>(message: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if message.is_instance_of::<PyDict>() || !message.hasattr("model_dump")? {
        return Ok(message.clone());
    }
    message
        .py()
        .import("context_core.sdk_messages")?
        .getattr("message_of")?
        .call1((message,))
}

fn durability(name: &str) -> PyResult<Durability> {
    match name {
        "always" => Ok(Durability::Always),
        "batch" => Ok(Durability::Batch),
        "never" => Ok(Durability::Never),
        other => Err(invalid_input(format!(
            "durability must be \"always\", \"batch\" or \"never\", not {other:?}"
        ))),
    }
}

/// A window's kept `(seq, part)` pairs, and its view as a node count (every
/// node `0..n`), a count and the seqs left out (a plain log rewound), or its
/// seqs; seqs as little-endian u64 bytes (one copy, no Python int each).
#[allow(clippy::type_complexity)]
fn kept_and_view(window: &Window) -> PyResult<(Vec<(u64, &'static str)>, Py<PyAny>)> {
    let kept = window
        .kept
        .iter()
        .map(|&(seq, part)| (seq, part_name(part)))
        .collect();
    let view = Python::attach(|py| -> PyResult<Py<PyAny>> {
        Ok(match &window.view {
            ViewSeqs::All(n) => n.into_pyobject(py)?.into_any().unbind(),
            ViewSeqs::AllBut(n, holes) => (*n, le_bytes(py, holes))
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            ViewSeqs::Listed(seqs) => le_bytes(py, seqs).into_any().unbind(),
        })
    })?;
    Ok((kept, view))
}

/// `seqs` as little-endian u64 bytes.
fn le_bytes<'py>(py: Python<'py>, seqs: &[u64]) -> Bound<'py, PyBytes> {
    let bytes: Vec<u8> = seqs.iter().flat_map(|s| s.to_le_bytes()).collect();
    PyBytes::new(py, &bytes)
}

fn part_name(part: ViewPart) -> &'static str {
    match part {
        ViewPart::Anchor => "anchor",
        ViewPart::Global => "global",
        ViewPart::Segment => "segment",
        ViewPart::Raw => "raw",
    }
}

fn tag_mask(tags: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u8>> {
    let Some(tags) = tags.filter(|t| !t.is_none()) else {
        return Ok(None);
    };
    let names: Vec<String> = sequence(tags, "tags")?
        .iter()
        .enumerate()
        .map(|(i, t)| Ok(text(t, &format!("tags[{i}]"))?.into_owned()))
        .collect::<PyResult<_>>()?;
    Ok(Some(
        tags::mask_of(names.iter().map(String::as_str)).map_err(CoreError)?,
    ))
}

fn flag(value: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    value
        .cast::<PyBool>()
        .map(PyBoolMethods::is_true)
        .map_err(|_| invalid_type(format!("{what} must be bool, not {}", type_name(value))))
}

/// `None`, or an int or float (not a bool) as `f64`.
fn number(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<f64>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if value.is_instance_of::<PyBool>()
        || !(value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>())
    {
        return Err(invalid_type(format!(
            "{what}: expected a number, got {}",
            type_name(value)
        )));
    }
    match value.extract::<f64>() {
        Ok(number) => Ok(Some(number)),
        // An int past a float's range (10**400) is as far out as infinity:
        // refused by the range checks, as the same number in a message is.
        Err(error) if error.is_instance_of::<PyOverflowError>(value.py()) => {
            Ok(Some(if value.lt(0)? {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }))
        }
        // An interrupt or an exit raised by a subclass's own conversion goes on as it is.
        Err(error) if !error.is_instance_of::<PyException>(value.py()) => Err(error),
        // A subclass whose own conversion fails is no number either.
        Err(_) => Err(invalid_type(format!(
            "{what}: expected a number, got {}",
            type_name(value)
        ))),
    }
}

/// A seq: an int or any integer type (`__index__`: numpy's too), not a
/// bool; one beyond `i64` is no node either way.
fn seq(value: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    let integer = value.is_instance_of::<PyInt>() || value.get_type().hasattr("__index__")?;
    if value.is_instance_of::<PyBool>() || !integer {
        return Err(invalid_type(format!(
            "{what}: a seq must be int, not {}",
            type_name(value)
        )));
    }
    Ok(value
        .extract()
        .unwrap_or(if value.lt(0)? { i64::MIN } else { i64::MAX }))
}

/// The keywords of `MessageLog.open`, read from the dict itself: an explicit
/// `None` is told from an absent keyword (and refused where it means nothing).
fn open_options(given: Option<&Bound<'_, PyDict>>) -> PyResult<OpenOptions> {
    let mut options = OpenOptions::default();
    let Some(given) = given else {
        return Ok(options);
    };
    for (key, value) in given.iter() {
        let key = text(&key, "a keyword")?;
        match key.as_ref() {
            "create" => options.create = flag(&value, "create")?,
            "readonly" => options.readonly = flag(&value, "readonly")?,
            "encoding" if value.is_none() => options.encoding = None,
            "encoding" => {
                options.encoding =
                    Some(Encoding::from_name(&text(&value, "encoding")?).map_err(CoreError)?);
            }
            "new_encoding" if value.is_none() => options.new_encoding = None,
            "new_encoding" => {
                options.new_encoding =
                    Some(Encoding::from_name(&text(&value, "new_encoding")?).map_err(CoreError)?);
            }
            "durability" => options.durability = durability(&text(&value, "durability")?)?,
            "lock_timeout" => options.lock_timeout = seconds(&value)?,
            other => {
                return Err(invalid_type(format!(
                    "MessageLog.open() got an unexpected keyword {other:?}"
                )));
            }
        }
    }
    Ok(options)
}

/// A log's directory: a `str` or `os.PathLike` naming one as `str`.
fn directory(path: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let named = if path.is_instance_of::<PyString>() {
        path.clone()
    } else if path.hasattr("__fspath__")? {
        path.call_method0("__fspath__")?
    } else {
        return Err(invalid_type(format!(
            "path must be str or os.PathLike, not {}",
            type_name(path)
        )));
    };
    let named = named.cast::<PyString>().map_err(|_| {
        invalid_type(format!(
            "path must name a directory as str, not {}",
            type_name(&named)
        ))
    })?;
    Ok(PathBuf::from(named.to_str()?))
}

/// `lock_timeout`: seconds >= 0 as an int or float.
fn seconds(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let seconds = number(Some(value), "lock_timeout")?
        .ok_or_else(|| invalid_type("lock_timeout must be a number of seconds, not None"))?;
    if !(seconds.is_finite() && seconds >= 0.0) {
        return Err(invalid_input(format!(
            "lock_timeout must be a number of seconds >= 0, not {seconds}"
        )));
    }
    Ok(Duration::from_secs_f64(seconds.min(1e9)))
}

// pyo3 hands arguments over by value.
#[allow(clippy::needless_pass_by_value)]
#[pymethods]
impl PyMessageLog {
    #[new]
    #[pyo3(signature = (path, **options))]
    fn new(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let path = directory(path)?;
        let options = open_options(options)?;
        // Waiting for the lock must not hold up other Python threads.
        let log = py
            .detach(|| MessageLog::open(&path, &options))
            .map_err(CoreError)?;
        Ok(Self {
            inner: Mutex::new(log),
            origin: Origin::here(),
        })
    }

    /// Append `message` as a child of `parent` (default: the head); its seq.
    ///
    /// Its exact token count and its tags are computed once, here, and kept
    /// in its header; keywords override what the message itself says.
    /// `tags` is any iterable of tag names; `InvalidTypeError` for a `pinned`
    /// that is not a bool or `None`, a number that is not one, a seq that is
    /// not an int.
    #[pyo3(signature = (message, *, tags = None, weight = None, pinned = None, priority = None, parent = None, timestamp = None))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        message: &Bound<'_, PyAny>,
        tags: Option<&Bound<'_, PyAny>>,
        weight: Option<&Bound<'_, PyAny>>,
        pinned: Option<&Bound<'_, PyAny>>,
        priority: Option<&Bound<'_, PyAny>>,
        parent: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let parent = match parent.map(|p| seq(p, "parent")).transpose()? {
            Some(p) if p < 0 => {
                return Err(CoreError(context_core::Error::LogIndex {
                    seq: p,
                    len: self.log()?.len().map_err(CoreError)?,
                })
                .into());
            }
            other => other.map(|p| p as u64),
        };
        let options = AppendOptions {
            tags: tag_mask(tags)?,
            weight: number(weight, "weight")?,
            pinned: pinned.map_or(Ok(false), |p| flag(p, "pinned"))?,
            priority: number(priority, "priority")?,
            parent,
            timestamp: number(timestamp, "timestamp")?,
        };
        let message = sdk_message(message)?;
        Ok(self
            .log()?
            .append(&PyJson(message), &options, &LOG_TAGGER)
            .map_err(CoreError)?)
    }

    /// `(first, end)` seqs of the appended messages.
    #[pyo3(name = "_append_many")]
    fn append_many(&self, messages: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        let views: Vec<PyJson<'_>> = sequence(messages, "messages")?
            .iter()
            .map(|m| sdk_message(m).map(PyJson))
            .collect::<PyResult<_>>()?;
        if let Some(range) = self.append_many_parallel(&views)? {
            return Ok(range);
        }
        let range = self
            .log()?
            .append_many(&views, &LOG_TAGGER)
            .map_err(CoreError)?;
        Ok((range.start, range.end))
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.log()?.len().map_err(CoreError)? as usize)
    }

    /// The JSON payload of each of `seqs` (empty for a branch marker).
    #[pyo3(name = "_read")]
    fn read<'py>(
        &self,
        py: Python<'py>,
        seqs: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let seqs = seqs
            .iter()
            .map(|s| seq(s, "seqs"))
            .collect::<PyResult<Vec<_>>>()?;
        let payloads = self.log()?.read(&seqs).map_err(CoreError)?;
        Ok(payloads.iter().map(|p| PyBytes::new(py, p)).collect())
    }

    /// The context view: `(seq, part)` with part `anchor`, `global`, `segment` or `raw`.
    #[pyo3(name = "_view")]
    fn view(&self) -> PyResult<Vec<(u64, &'static str)>> {
        let view = self.log()?.view().map_err(CoreError)?;
        Ok(view
            .into_iter()
            .map(|(seq, part)| (seq, part_name(part)))
            .collect())
    }

    /// The weighted window over the context view from the headers alone:
    /// `(kept (seq, part) pairs, (pinned, global, segments, recent, input) tokens,
    /// view, pinned)`: the view chosen from, as a node count (every node `0..n`)
    /// or its seqs as little-endian u64 bytes (one copy, no Python int each);
    /// the kept seqs pinned at append. `None` where a tool result over `cap`
    /// has no capped count yet: count it (`_over_cap`) and ask again.
    #[pyo3(name = "_weighted", signature = (budget, weights, max_anchors, recent_turns, now = None, cap = None, stand_ins = Vec::new()))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn weighted(
        &self,
        budget: usize,
        weights: WeightRow,
        max_anchors: usize,
        recent_turns: usize,
        now: Option<f64>,
        cap: Option<usize>,
        stand_ins: Vec<(u64, usize)>,
    ) -> PyResult<
        Option<(
            Vec<(u64, &'static str)>,
            (usize, usize, usize, usize, usize),
            Py<PyAny>,
            Vec<u64>,
        )>,
    > {
        let Some(window) = with_stand_ins(&mut *self.log()?, &stand_ins, |log| {
            log.weighted_window(
                budget,
                &weights_of(weights),
                max_anchors,
                recent_turns,
                now,
                cap,
            )
        })
        .map_err(CoreError)?
        else {
            return Ok(None);
        };
        let (kept, view) = kept_and_view(&window)?;
        Ok(Some((
            kept,
            (
                window.pinned,
                window.global,
                window.segments,
                window.recent,
                window.input,
            ),
            view,
            window.pinned_by_header,
        )))
    }

    /// ShapeHistory over the context view from the headers alone:
    /// `(kept (seq, part) pairs, view, pinned, turns, with_summary)` (the
    /// view as for `_weighted`; `pinned`: the kept seqs pinned at append),
    /// or `None` as for `_weighted`.
    #[pyo3(name = "_shape", signature = (budget, keep_last, min_keep, summary_tokens = None, cap = None, stand_ins = Vec::new()))]
    #[allow(clippy::type_complexity)]
    fn shape(
        &self,
        budget: usize,
        keep_last: usize,
        min_keep: usize,
        summary_tokens: Option<usize>,
        cap: Option<usize>,
        stand_ins: Vec<(u64, usize)>,
    ) -> PyResult<
        Option<(
            Vec<(u64, &'static str)>,
            Py<PyAny>,
            Vec<u64>,
            Option<usize>,
            bool,
        )>,
    > {
        let Some((window, shape)) = with_stand_ins(&mut *self.log()?, &stand_ins, |log| {
            log.shape_window(budget, keep_last, min_keep, summary_tokens, cap)
        })
        .map_err(CoreError)?
        else {
            return Ok(None);
        };
        let (kept, view) = kept_and_view(&window)?;
        let pinned = window.pinned_by_header;
        Ok(Some((kept, view, pinned, shape.turns, shape.summary)))
    }

    /// The priority builder over the context view from the headers alone:
    /// `(kept (seq, part) pairs, view, pinned, with_global, kept memories,
    /// kept segments)` (indices into the costs given), or `None` (as for `_shape`).
    #[pyo3(name = "_priority", signature = (budget, global_tokens, memories, segments, cap = None, stand_ins = Vec::new()))]
    #[allow(clippy::type_complexity)]
    fn priority(
        &self,
        budget: usize,
        global_tokens: Option<usize>,
        memories: Vec<usize>,
        segments: Vec<usize>,
        cap: Option<usize>,
        stand_ins: Vec<(u64, usize)>,
    ) -> PyResult<
        Option<(
            Vec<(u64, &'static str)>,
            Py<PyAny>,
            Vec<u64>,
            bool,
            Vec<usize>,
            Vec<usize>,
        )>,
    > {
        let extras = Extras {
            global: global_tokens,
            memories,
            segments,
            anchoring: None,
        };
        let Some((window, build)) = with_stand_ins(&mut *self.log()?, &stand_ins, |log| {
            log.priority_window(budget, &extras, cap)
        })
        .map_err(CoreError)?
        else {
            return Ok(None);
        };
        let (kept, view) = kept_and_view(&window)?;
        let pinned = window.pinned_by_header;
        Ok(Some((
            kept,
            view,
            pinned,
            build.global,
            build.memories,
            build.segments,
        )))
    }

    /// `(seqs, start, upto)`: the records of `start..upto` not yet looked at
    /// for `cap` that may hold a tool result over it; hand their capped
    /// counts to `_set_capped`.
    #[pyo3(name = "_over_cap")]
    fn over_cap(&self, cap: usize) -> PyResult<(Vec<u64>, u64, u64)> {
        self.log()?.over_cap(cap).map_err(|e| CoreError(e).into())
    }

    /// Remember `(seq, tokens)` capped counts for `cap`, every record of `start..upto` looked at.
    #[pyo3(name = "_set_capped")]
    fn set_capped(
        &self,
        cap: usize,
        start: u64,
        upto: u64,
        counts: Vec<(u64, usize)>,
    ) -> PyResult<()> {
        self.log()?.set_capped(cap, start, upto, &counts);
        Ok(())
    }

    /// `timestamp (µs, hex)-payload crc`: a stable id for other systems.
    fn node_id(&self, seq: &Bound<'_, PyAny>) -> PyResult<String> {
        let seq = self::seq(seq, "seq")?;
        Ok(self.log()?.header(seq).map_err(CoreError)?.id())
    }

    /// `add_summary(text, covers, level)` checks `covers` is a pair first.
    #[pyo3(name = "_add_summary")]
    fn add_summary(
        &self,
        text: &Bound<'_, PyAny>,
        first: &Bound<'_, PyAny>,
        last: &Bound<'_, PyAny>,
        level: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let (text, first, last, level) = summary_args(text, first, last, level)?;
        Ok(self
            .log()?
            .add_summary(text, first, last, level, &LOG_TAGGER)
            .map_err(CoreError)?)
    }

    /// `_add_summary`, only if the newest summary on the active path is
    /// still `expected_summary` and node `last` still on the active path
    /// (checked and written under the log's lock); `None` if not, nothing
    /// written.
    fn _add_summary_if(
        &self,
        text: &Bound<'_, PyAny>,
        first: &Bound<'_, PyAny>,
        last: &Bound<'_, PyAny>,
        level: &Bound<'_, PyAny>,
        expected_summary: Option<u64>,
    ) -> PyResult<Option<u64>> {
        let (text, first, last, level) = summary_args(text, first, last, level)?;
        Ok(self
            .log()?
            .add_summary_if(text, first, last, level, &LOG_TAGGER, expected_summary)
            .map_err(CoreError)?)
    }

    /// Start a new branch at node `seq`: the next append is its child.
    fn rewind(&self, seq: &Bound<'_, PyAny>) -> PyResult<()> {
        let seq = self::seq(seq, "seq")?;
        Ok(self.log()?.rewind(seq).map_err(CoreError)?)
    }

    /// The active head: the node the next append will be a child of.
    #[getter]
    fn head(&self) -> PyResult<Option<u64>> {
        Ok(self.log()?.head().map_err(CoreError)?)
    }

    /// The last seq the newest summary on the active path covers.
    #[getter]
    fn last_summary_index(&self) -> PyResult<Option<u64>> {
        Ok(self.log()?.last_summary_index().map_err(CoreError)?)
    }

    /// Seqs from the root to `head` (default: the active head).
    #[pyo3(signature = (head = None))]
    fn path(&self, head: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u64>> {
        let head = head.map(|h| seq(h, "head")).transpose()?;
        Ok(self.log()?.path_to(head).map_err(CoreError)?)
    }

    /// How many turns the active path holds (see `MessageLog::turn_starts`).
    fn _turns(&self) -> PyResult<u64> {
        Ok(self.log()?.turn_starts().map_err(CoreError)?)
    }

    /// The next compaction step: `("wait", turns, tokens)` or `("job",
    /// level, first, last, messages, segments, rules, base)` (see
    /// `context_core.compaction.plan`). Planned with the interpreter
    /// released: a background job's plan must not stall the turn's thread.
    fn _plan(
        &self,
        py: Python<'_>,
        recent_turns: usize,
        segment_turns: usize,
        segments_kept: usize,
        tail_tokens: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        if segment_turns == 0 || segments_kept == 0 {
            return Err(invalid_input(
                "segment_turns and segments_kept must be at least 1",
            ));
        }
        let options = PlanOptions {
            recent_turns,
            segment_turns,
            segments_kept,
            tail_tokens,
        };
        // The log's lock is taken and let go inside: a thread that holds the
        // interpreter and waits for the lock never waits on us for it.
        let plan = py
            .detach(|| self.locked()?.compaction_plan(&options))
            .map_err(CoreError)?;
        Ok(match plan {
            Plan::Wait { turns, tokens } => ("wait", turns, tokens)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Plan::Job(job) => (
                "job",
                job.level,
                job.covers.0,
                job.covers.1,
                job.messages,
                job.segments,
                job.rules,
                job.base,
            )
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        })
    }

    /// The encoding the log counts tokens in.
    #[getter]
    fn encoding(&self) -> PyResult<&'static str> {
        Ok(self.log()?.encoding().name())
    }

    /// Whether this handle only reads (`readonly=True`).
    #[getter]
    fn readonly(&self) -> PyResult<bool> {
        Ok(self.log()?.is_readonly())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.log()?.is_closed())
    }

    /// Make every append so far durable (fsync).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.locked()?.flush()).map_err(CoreError)?)
    }

    /// `MessageLog.close` also drops its map of the index.
    #[pyo3(name = "_close")]
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py
            .detach(|| match self.locked() {
                Ok(mut log) => log.close(),
                // A child of a fork whose log a vanished thread still holds:
                // this handle writes nothing and keeps no lock here, and it
                // is dropped (without waiting) with the object.
                Err(context_core::Error::LogForked { .. }) => Ok(()),
                Err(other) => Err(other),
            })
            .map_err(CoreError)?)
    }

    /// Check every record and frame; raises `LogCorruptError` naming the
    /// file and offset of the first problem.
    fn verify(&self) -> PyResult<()> {
        Ok(self.log()?.verify().map_err(CoreError)?)
    }

    /// `(kept, lost, dropped_bytes, problems)`.
    #[staticmethod]
    #[pyo3(name = "_repair", signature = (path, lock_timeout))]
    fn repair(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        lock_timeout: &Bound<'_, PyAny>,
    ) -> PyResult<(u64, u64, u64, Vec<String>)> {
        let path = directory(path)?;
        let timeout = seconds(lock_timeout)?;
        let report = py
            .detach(|| MessageLog::repair(&path, timeout))
            .map_err(CoreError)?;
        Ok((
            report.kept,
            report.lost,
            report.dropped_bytes,
            report.problems,
        ))
    }

    /// A new descriptor of the index file this log opened (the caller
    /// closes it): `headers()` maps the same file, never one a link or a
    /// rename has put at the path since.
    #[pyo3(name = "_index_fd")]
    fn index_fd(&self) -> PyResult<i32> {
        use std::os::fd::IntoRawFd;
        let mut log = self.log()?;
        let path = log.path().join("index").display().to_string();
        let file = log.index_file().map_err(CoreError)?;
        let copy = file.try_clone().map_err(|e| {
            CoreError(context_core::log::storage(
                std::path::Path::new(&path),
                "duplicate",
                &e,
            ))
        })?;
        Ok(copy.into_raw_fd())
    }
}

/// A summary's text, covered range and level, checked. The text is stored
/// as given or not at all: a lone surrogate is refused, as in messages, not
/// repaired into U+FFFD. A negative seq is no node: past every node, so the
/// core refuses it.
fn summary_args<'a>(
    text: &'a Bound<'_, PyAny>,
    first: &Bound<'_, PyAny>,
    last: &Bound<'_, PyAny>,
    level: &Bound<'_, PyAny>,
) -> PyResult<(&'a str, u64, u64, u8)> {
    let text = as_str(text, "text")?.to_str().map_err(|_| {
        invalid_input("text: a string holds a lone surrogate (not valid Unicode), so it cannot be stored as it is")
    })?;
    let (first, last) = (seq(first, "covers")?, seq(last, "covers")?);
    let node = |seq: i64| u64::try_from(seq).unwrap_or(u64::MAX);
    Ok((text, node(first), node(last), summary_level(level)?))
}

/// A summary's level: the int 2 or 3.
fn summary_level(level: &Bound<'_, PyAny>) -> PyResult<u8> {
    if level.is_instance_of::<PyBool>() || !level.is_instance_of::<PyInt>() {
        return Err(invalid_type(format!(
            "level must be int, not {}",
            type_name(level)
        )));
    }
    let Ok(level @ (2 | 3)) = level.extract::<u8>() else {
        return Err(invalid_input(format!("level must be 2 or 3, not {level}")));
    };
    Ok(level)
}

/// `select` on `log` with `stand_ins` ((seq, tokens)) counted in place of
/// those records' own, and none after (none set: the log's own counts).
fn with_stand_ins<T>(
    log: &mut MessageLog,
    stand_ins: &[(u64, usize)],
    select: impl FnOnce(&mut MessageLog) -> T,
) -> T {
    log.set_stand_ins(stand_ins);
    let chosen = select(log);
    if !stand_ins.is_empty() {
        log.set_stand_ins(&[]);
    }
    chosen
}
