//! The selection kernel's Python face: `Tagger`, and `_analyze` with the
//! policies on its result. `context_core.select` lays the output out.

use std::sync::LazyLock;

use context_core::select::{self, Analysis, Extras, MessageInfo, Truncation, UnitKind, Weights};
use context_core::tags::{self, Keywords, Tagger};
use pyo3::prelude::*;

use crate::answered::Verified;
use crate::errors::{CoreError, invalid_input};
use crate::json::PyJson;
use crate::read_runs;
use crate::sanitize::{PySanitizeResult, PySanitizer};
use crate::seen;
use crate::text::{as_count, sequence, text};
use crate::tokenizer::PyTokenizer;
use pyo3::types::{PyDict, PyInt, PyList, PyString, PyTuple};

/// The tagger with the default keyword lists.
pub static DEFAULT_TAGGER: LazyLock<Tagger> =
    LazyLock::new(|| Tagger::new(&Keywords::default()).expect("the default keywords compile"));

/// Tags texts `constraint`, `evidence`, `pulse` and `log` by keyword lists.
#[pyclass(frozen, name = "Tagger", module = "context_core.select")]
pub struct PyTagger {
    inner: Option<Tagger>,
    /// Distinct per tagger made (0: the default keywords), so what was
    /// read under one is never taken for another's.
    number: u64,
}

static TAGGERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl PyTagger {
    fn get(&self) -> &Tagger {
        self.inner.as_ref().unwrap_or(&DEFAULT_TAGGER)
    }
}

fn keyword_list(
    value: Option<&Bound<'_, PyAny>>,
    what: &str,
    default: &[&str],
) -> PyResult<Vec<String>> {
    match value.filter(|v| !v.is_none()) {
        None => Ok(default.iter().map(|k| (*k).to_owned()).collect()),
        Some(v) => sequence(v, what)?
            .iter()
            .enumerate()
            .map(|(i, k)| Ok(text(k, &format!("{what}[{i}]"))?.into_owned()))
            .collect(),
    }
}

#[pymethods]
impl PyTagger {
    #[new]
    #[pyo3(signature = (*, constraint_keywords = None, pulse_keywords = None, evidence_markers = None, log_markers = None, constraint_openers = None))]
    fn new(
        constraint_keywords: Option<&Bound<'_, PyAny>>,
        pulse_keywords: Option<&Bound<'_, PyAny>>,
        evidence_markers: Option<&Bound<'_, PyAny>>,
        log_markers: Option<&Bound<'_, PyAny>>,
        constraint_openers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let given = [
            constraint_keywords,
            pulse_keywords,
            evidence_markers,
            log_markers,
            constraint_openers,
        ];
        if given.iter().all(|g| g.is_none_or(PyAnyMethods::is_none)) {
            return Ok(Self {
                inner: None,
                number: 0,
            });
        }
        let keywords = Keywords {
            constraint: keyword_list(
                constraint_keywords,
                "constraint_keywords",
                tags::DEFAULT_CONSTRAINT_KEYWORDS,
            )?,
            constraint_openers: keyword_list(
                constraint_openers,
                "constraint_openers",
                tags::DEFAULT_CONSTRAINT_OPENERS,
            )?,
            pulse: keyword_list(
                pulse_keywords,
                "pulse_keywords",
                tags::DEFAULT_PULSE_KEYWORDS,
            )?,
            evidence: keyword_list(
                evidence_markers,
                "evidence_markers",
                tags::DEFAULT_EVIDENCE_MARKERS,
            )?,
            log: keyword_list(log_markers, "log_markers", tags::DEFAULT_LOG_MARKERS)?,
        };
        Ok(Self {
            inner: Some(Tagger::new(&keywords).map_err(CoreError)?),
            number: TAGGERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The tags whose keywords occur in `text`.
    /// (The parameter is named as the stub names it: `tag(text=...)` works.)
    fn tag(&self, text: &Bound<'_, PyAny>) -> PyResult<Vec<&'static str>> {
        let value = crate::text::text(text, "text")?;
        Ok(tags::names(self.get().tag(&value)))
    }
}

/// `(message, block, part, text, before, after)` of a capped tool result.
type TruncationRow = (
    usize,
    Option<usize>,
    Option<usize>,
    Py<PyString>,
    usize,
    usize,
);
/// `(messages, tokens, units)` of a plan laid out.
type LaidOutRow = (Vec<Py<PyAny>>, Vec<Option<usize>>, Vec<usize>);
/// `(kept, dropped, missing dependencies, truncated)`, as the tuples a
/// `Selection` holds (made once here, not copied again there).
type KeptRow<'py> = (
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
);

/// A tool result cut to the cap before selection: message `index`, and its
/// tokens before the cut (`tokens`) and after it (`kept`).
#[pyclass(
    frozen,
    eq,
    hash,
    get_all,
    name = "ToolResultCut",
    module = "context_core.select"
)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyToolResultCut {
    index: usize,
    tokens: usize,
    kept: usize,
}

#[pymethods]
impl PyToolResultCut {
    #[new]
    fn new(index: usize, tokens: usize, kept: usize) -> Self {
        Self {
            index,
            tokens,
            kept,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "ToolResultCut(index={}, tokens={}, kept={})",
            self.index, self.tokens, self.kept
        )
    }

    /// Pickles and copies by its fields (the class and its constructor's arguments).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyAny>, (usize, usize, usize)) {
        let cut = slf.get();
        (slf.get_type().into_any(), (cut.index, cut.tokens, cut.kept))
    }
}

/// `(fixed, recent, current, global, anchoring, memories, segments)` the builder keeps.
type BuildRow = (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    bool,
    bool,
    Vec<usize>,
    Vec<usize>,
);

/// `(system, constraint, evidence, pulse, log, decay, tag_decay)`.
pub type WeightRow = (f64, f64, f64, f64, f64, f64, f64);

pub fn weights_of(row: WeightRow) -> Weights {
    let (system, constraint, evidence, pulse, log, decay, tag_decay) = row;
    Weights {
        system,
        constraint,
        evidence,
        pulse,
        log,
        decay,
        tag_decay,
    }
}

/// A history read for selection.
#[pyclass(frozen, name = "_Analysis", module = "context_core._core")]
pub struct PyAnalysis {
    inner: Analysis,
    /// The messages read, as given.
    messages: Vec<Py<PyAny>>,
    /// The capped texts, beside `inner.truncations`.
    cut_texts: Vec<Py<PyString>>,
    /// Each message's laid-out form, where one was made before.
    laid_out: Vec<Option<seen::LaidOut>>,
    /// What the messages were read under.
    context: seen::Context,
    /// Every message is known to hold plain values only (see `plain`).
    plain: bool,
}

impl PyAnalysis {
    /// Unit `u`, or an error naming it.
    fn unit(&self, u: usize) -> PyResult<&context_core::select::Unit> {
        self.inner
            .units
            .get(u)
            .ok_or_else(|| invalid_input(format!("no unit {u}")))
    }

    /// The laid-out messages of `items` (see `lay_out`), and which of them
    /// are copies this call checked or made (see [`Verified`]).
    fn lay_out_vouched(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
    ) -> PyResult<(LaidOutRow, Vec<bool>)> {
        let items = sequence(items, "items")?;
        let mut out = Vec::with_capacity(items.len());
        let mut tokens = Vec::with_capacity(items.len());
        let mut units = Vec::with_capacity(items.len());
        let mut vouched = Vec::with_capacity(items.len());
        for item in &items {
            if item.is_exact_instance_of::<PyInt>() {
                let u = item.extract::<usize>()?;
                units.push(u);
                self.push_unit(py, u, &mut out, &mut vouched, &mut |t| tokens.push(Some(t)))?;
            } else {
                out.push(item.clone().unbind());
                vouched.push(false);
                tokens.push(None);
            }
        }
        Ok(((out, tokens, units), vouched))
    }

    /// Lay out the messages of unit `u` into `out`, telling `tokens` each
    /// one's exact count, and `vouched` whether it is a copy checked or made now.
    fn push_unit(
        &self,
        py: Python<'_>,
        u: usize,
        out: &mut Vec<Py<PyAny>>,
        vouched: &mut Vec<bool>,
        tokens: &mut impl FnMut(usize),
    ) -> PyResult<()> {
        let unit = self.unit(u)?;
        for m in unit.start..unit.end {
            tokens(self.inner.messages[m].tokens);
            let message = self.messages[m].bind(py);
            let info = &self.inner.messages[m];
            let has_cuts = self.has_cuts(m);
            if !info.has_metadata && !has_cuts {
                out.push(message.clone().unbind());
                vouched.push(false);
                continue;
            }
            vouched.push(true);
            if let Some(output) = self.laid_out[m].as_ref().and_then(|o| o.get(py)) {
                out.push(output);
                continue;
            }
            let output = lay_out(py, message, &self.cuts_of(py, m))?;
            // A copy without cuts holds only the message's own values.
            let stored = if has_cuts {
                seen::Stored::of(&output)
            } else {
                seen::Stored::sharing(output.cast::<PyDict>()?)
            };
            if let Some(stored) = stored {
                seen::remember_output(message, self.context, &stored);
                read_runs::remember_output(message, m, self.context, &stored);
            }
            out.push(output.unbind());
        }
        Ok(())
    }

    fn has_cuts(&self, m: usize) -> bool {
        let all = &self.inner.truncations;
        all.get(all.partition_point(|t| t.message < m))
            .is_some_and(|t| t.message == m)
    }

    /// `(block, part, text)` of each capped tool result of message `m`.
    fn cuts_of(
        &self,
        py: Python<'_>,
        m: usize,
    ) -> Vec<(Option<usize>, Option<usize>, Py<PyString>)> {
        let all = &self.inner.truncations;
        let from = all.partition_point(|t| t.message < m);
        let py_texts = &self.cut_texts[from..];
        all[from..]
            .iter()
            .zip(py_texts)
            .take_while(|(t, _)| t.message == m)
            .map(|(t, text)| (t.block, t.part, text.clone_ref(py)))
            .collect()
    }
}

fn kind_name(kind: UnitKind) -> &'static str {
    match kind {
        UnitKind::System => "system",
        UnitKind::Pinned => "pinned",
        UnitKind::Current => "current",
        UnitKind::Normal => "normal",
    }
}

#[pymethods]
impl PyAnalysis {
    /// `(start, end, tokens, kind, tags, turn_start)` per unit.
    #[getter]
    fn units(&self) -> Vec<(usize, usize, usize, &'static str, u8, bool)> {
        self.inner
            .units
            .iter()
            .map(|u| {
                (
                    u.start,
                    u.end,
                    u.tokens,
                    kind_name(u.kind),
                    u.tags,
                    u.turn_start,
                )
            })
            .collect()
    }

    /// Exact tokens of each message (tool results capped).
    #[getter]
    fn tokens(&self) -> Vec<usize> {
        self.inner.messages.iter().map(|m| m.tokens).collect()
    }

    /// Tag mask of each message.
    #[getter]
    fn tags(&self) -> Vec<u8> {
        self.inner.messages.iter().map(|m| m.tags).collect()
    }

    /// `(id, depends_on)` of each message.
    #[getter]
    fn ids(&self) -> Vec<(Option<String>, Vec<String>)> {
        self.inner
            .messages
            .iter()
            .map(|m| (m.id.clone(), m.depends_on.clone()))
            .collect()
    }

    /// `(message, block, part, text, before, after)` per capped tool result.
    #[getter]
    fn truncations(&self, py: Python<'_>) -> Vec<TruncationRow> {
        self.inner
            .truncations
            .iter()
            .zip(&self.cut_texts)
            .map(|(t, text)| {
                (
                    t.message,
                    t.block,
                    t.part,
                    text.clone_ref(py),
                    t.before,
                    t.after,
                )
            })
            .collect()
    }

    /// What a plan lays out, in order: each item a unit (an int: its
    /// messages as sent, metadata keys taken off and tool results capped,
    /// copies made once and kept, see `seen`; the caller's own objects
    /// where nothing is to change) or an extra message (a dict, as it is). Returns the messages, each one's exact tokens
    /// (`None` for an extra: the caller counts it) and the units.
    fn lay_out(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<LaidOutRow> {
        let (row, _) = self.lay_out_vouched(py, items)?;
        Ok(row)
    }

    /// [`lay_out`](Self::lay_out), and `sanitizer`'s answer for the messages
    /// laid out, in the same call: the copies it checked (or made) just now
    /// are vouched for, so the funnel does not walk them again. The last
    /// item is the tokens of the answer's messages (without the reply
    /// priming), the known counts then left out (`[]`): with `tokenizer`
    /// (the one the analysis counted with) always (see `sent_tokens`),
    /// without one when the funnel kept every message as it is and each
    /// count is known; else `None`.
    #[pyo3(signature = (items, sanitizer, tokenizer = None))]
    fn lay_out_sanitized(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        sanitizer: &PySanitizer,
        tokenizer: Option<&Bound<'_, PyTokenizer>>,
    ) -> PyResult<(LaidOutRow, PySanitizeResult, Option<usize>)> {
        let ((out, tokens, units), vouched) = self.lay_out_vouched(py, items)?;
        let messages: Vec<Bound<'_, PyAny>> = out.iter().map(|m| m.bind(py).clone()).collect();
        let answer = sanitizer.sanitize_items(py, &messages, Verified(&vouched))?;
        let sent = answer.messages.bind(py);
        let unchanged =
            sent.len() == out.len() && sent.iter().zip(&out).all(|(m, o)| m.as_ptr() == o.as_ptr());
        let known = unchanged
            .then(|| tokens.iter().copied().sum::<Option<usize>>())
            .flatten();
        let total = match (known, tokenizer) {
            (Some(total), _) => Some(total),
            (None, Some(tokenizer)) => Some(sent_tokens(
                tokenizer.get().inner(),
                &messages,
                &tokens,
                sent,
            )?),
            (None, None) => None,
        };
        let tokens = if total.is_some() { Vec::new() } else { tokens };
        Ok(((out, tokens, units), answer, total))
    }

    /// `(kept messages, dropped messages, missing dependencies, truncated)`
    /// when `units` are kept: each message's index, `(message, id)` where a
    /// kept message depends on a dropped one, and the kept tool results
    /// cut to the cap.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts an owned Vec
    fn kept<'py>(&self, py: Python<'py>, units: Vec<usize>) -> PyResult<KeptRow<'py>> {
        let (kept, dropped) = self.inner.expand(&units);
        let missing = self.inner.missing_dependencies(&kept);
        let mut is_kept = vec![false; self.inner.messages.len()];
        for &m in &kept {
            is_kept[m] = true;
        }
        let truncated: Vec<PyToolResultCut> = self
            .inner
            .truncations
            .iter()
            .filter(|t| is_kept[t.message])
            .map(|t| PyToolResultCut {
                index: t.message,
                tokens: t.before,
                kept: t.after,
            })
            .collect();
        Ok((
            PyTuple::new(py, kept)?,
            PyTuple::new(py, dropped)?,
            PyTuple::new(py, missing)?,
            PyTuple::new(py, truncated)?,
        ))
    }

    /// Tokens of every message together.
    #[getter]
    fn total_tokens(&self) -> usize {
        self.inner.total_tokens()
    }

    /// Whether any message names a dependency (`depends_on`, given or in its text).
    #[getter]
    fn depends(&self) -> bool {
        self.inner.messages.iter().any(|m| !m.depends_on.is_empty())
    }

    /// Whether every message is known to hold only dicts, lists, tuples,
    /// strings, numbers, booleans and `None` (no subclass): reading one
    /// then runs none of the caller's code.
    #[getter]
    fn plain(&self) -> bool {
        self.plain
    }

    /// Number of units.
    #[getter]
    fn unit_count(&self) -> usize {
        self.inner.units.len()
    }

    /// The first unit that starts a turn.
    #[getter]
    fn first_turn(&self) -> Option<usize> {
        self.inner.first_turn()
    }

    /// Units that start a turn.
    #[getter]
    fn turn_starts(&self) -> Vec<usize> {
        self.inner.turn_starts()
    }

    /// `(start, end, tokens, kind)` of each of `units`.
    fn spans(&self, units: Vec<usize>) -> PyResult<Vec<(usize, usize, usize, &'static str)>> {
        units
            .into_iter()
            .map(|u| {
                let unit = self.unit(u)?;
                Ok((unit.start, unit.end, unit.tokens, kind_name(unit.kind)))
            })
            .collect()
    }

    /// Tokens of `units` by kind: `(system, pinned, current, normal)`.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts an owned Vec
    fn kind_tokens(&self, units: Vec<usize>) -> PyResult<(usize, usize, usize, usize)> {
        let mut sums = [0usize; 4];
        for u in units {
            let unit = self.unit(u)?;
            let slot = match unit.kind {
                UnitKind::System => 0,
                UnitKind::Pinned => 1,
                UnitKind::Current => 2,
                UnitKind::Normal => 3,
            };
            sums[slot] += unit.tokens;
        }
        Ok((sums[0], sums[1], sums[2], sums[3]))
    }

    /// `(kept messages, dropped messages)` when `units` are kept.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts an owned Vec
    fn expand(&self, units: Vec<usize>) -> (Vec<usize>, Vec<usize>) {
        self.inner.expand(&units)
    }

    /// `(message, id)`: a kept message depends on a dropped one.
    #[allow(clippy::needless_pass_by_value)] // pyo3 extracts an owned Vec
    fn missing_dependencies(&self, kept: Vec<usize>) -> Vec<(usize, String)> {
        self.inner.missing_dependencies(&kept)
    }

    /// First messages of the units that can be anchored as constraints.
    fn constraint_starts(&self) -> Vec<usize> {
        self.inner.constraint_starts()
    }

    /// Units the weighted window keeps.
    fn weighted(
        &self,
        budget: &Bound<'_, PyAny>,
        weights: WeightRow,
        max_anchors: usize,
        recent_turns: usize,
        now: Option<f64>,
    ) -> PyResult<Vec<usize>> {
        let budget = as_count(budget, "max_tokens")?;
        Ok(select::weighted_window(
            &self.inner,
            budget,
            &weights_of(weights),
            max_anchors,
            recent_turns,
            now,
        )
        .map_err(CoreError)?)
    }

    /// `(units, turns, summary)` that ShapeHistory keeps.
    fn shape(
        &self,
        budget: &Bound<'_, PyAny>,
        keep_last: usize,
        min_keep: usize,
        summary_tokens: Option<usize>,
    ) -> PyResult<(Vec<usize>, Option<usize>, bool)> {
        let budget = as_count(budget, "max_tokens")?;
        let shape = select::shape(&self.inner, budget, keep_last, min_keep, summary_tokens)
            .map_err(CoreError)?;
        Ok((shape.units, shape.turns, shape.summary))
    }

    /// What the builder keeps: `(fixed, recent, current, global,
    /// anchoring, memories, segments)`, its units split by where they go
    /// (system and pinned; the rest of the history; the turn in progress),
    /// each in order.
    fn build(
        &self,
        budget: &Bound<'_, PyAny>,
        global_tokens: Option<usize>,
        memories: Vec<usize>,
        segments: Vec<usize>,
        anchoring: Option<usize>,
    ) -> PyResult<BuildRow> {
        let budget = as_count(budget, "max_tokens")?;
        let extras = Extras {
            global: global_tokens,
            memories,
            segments,
            anchoring,
        };
        let built = select::build(&self.inner, budget, &extras).map_err(CoreError)?;
        let (mut fixed, mut recent, mut current) = (Vec::new(), Vec::new(), Vec::new());
        for u in built.units {
            match self.unit(u)?.kind {
                UnitKind::System | UnitKind::Pinned => fixed.push(u),
                UnitKind::Normal => recent.push(u),
                UnitKind::Current => current.push(u),
            }
        }
        Ok((
            fixed,
            recent,
            current,
            built.global,
            built.anchoring,
            built.memories,
            built.segments,
        ))
    }
}

/// Read `messages` for selection: exact counts, tool results capped at `cap`
/// tokens, tags (given, and found unless `find_tags` is false) and units. A
/// message read before and unchanged since is not read again (see `seen`).
#[pyfunction]
#[pyo3(signature = (messages, tokenizer, tagger = None, cap = None, find_tags = true))]
pub fn _analyze(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    tokenizer: &Bound<'_, PyTokenizer>,
    tagger: Option<&Bound<'_, PyTagger>>,
    cap: Option<usize>,
    find_tags: bool,
) -> PyResult<PyAnalysis> {
    let items = sequence(messages, "messages")?;
    let tagger = tagger.map(Bound::get);
    let context = seen::Context {
        encoding: tokenizer.get().inner().encoding(),
        cap,
        tagger: find_tags.then(|| tagger.map_or(0, |t| t.number)),
    };
    let tagger = tagger.map_or(&*DEFAULT_TAGGER, PyTagger::get);
    let tagger = find_tags.then_some(tagger);
    let tokenizer = tokenizer.get().inner();
    let worth_remembering = seen::READ_FIRSTS.seen_before(items.first());
    // The start a kept run shares, then the rest: recalled by message, or read.
    let mut run = read_runs::take(&items, context)
        .or_else(|| worth_remembering.then(|| read_runs::Run::new(context)));
    let reused = run.as_ref().map_or(0, read_runs::Run::len);
    let mut read = Read::with_capacity(items.len());
    if let Some(run) = &run {
        run.read_into(py, &mut read);
    }
    let recalled = seen::recall_all(py, &items[reused..], context);
    let mut shape = seen::Shape::default();
    // The run grows while each message can be shaped, and stops at the first that cannot.
    let mut growing = run.is_some();
    // Whether every message is known to be made of plain values only (taken
    // from the run, recalled, or walked): reading it runs no caller code.
    let mut plain = true;
    for ((index, message), recalled) in items.iter().enumerate().skip(reused).zip(recalled) {
        let new = recalled.is_none();
        let (info, cuts, output) = if let Some(found) = recalled {
            (found.info, found.cuts, found.output)
        } else {
            let (info, truncations) =
                select::read_message(&PyJson(message.clone()), tokenizer, tagger, cap)
                    .map_err(|e| CoreError(e.within(&format!("messages[{index}]"))))?;
            let cuts: Vec<seen::Cut> = truncations
                .into_iter()
                .map(|truncation| seen::Cut {
                    text: PyString::new(py, &truncation.text).unbind(),
                    truncation,
                })
                .collect();
            (info, cuts, None)
        };
        if growing || (worth_remembering && new) {
            let walked = shape.of(message);
            plain = plain && (walked || !new);
            if worth_remembering && new && walked {
                seen::remember(py, message, &shape, context, &info, &cuts);
            }
            growing = growing && walked;
            if let (true, Some(run)) = (growing, run.as_mut()) {
                run.push(py, message, &shape, &info, &cuts, output.as_ref());
            }
        } else {
            plain = plain && !new;
        }
        read.push(py, info, &cuts, output);
    }
    if let Some(run) = run {
        read_runs::keep(run);
    }
    let Read {
        infos,
        truncations,
        cut_texts,
        laid_out,
    } = read;
    Ok(PyAnalysis {
        inner: select::assemble(infos, truncations),
        messages: items.into_iter().map(Bound::unbind).collect(),
        cut_texts,
        laid_out,
        context,
        plain,
    })
}

/// What `_analyze` read of each message, gathered as it goes.
pub struct Read {
    pub infos: Vec<MessageInfo>,
    pub truncations: Vec<Truncation>,
    pub cut_texts: Vec<Py<PyString>>,
    pub laid_out: Vec<Option<seen::LaidOut>>,
}

impl Read {
    fn with_capacity(n: usize) -> Self {
        Self {
            infos: Vec::with_capacity(n),
            truncations: Vec::new(),
            cut_texts: Vec::new(),
            laid_out: Vec::with_capacity(n),
        }
    }

    /// Add the next message's facts, its capped tool results and laid-out form.
    pub fn push(
        &mut self,
        py: Python<'_>,
        info: MessageInfo,
        cuts: &[seen::Cut],
        output: Option<seen::LaidOut>,
    ) {
        let index = self.infos.len();
        for cut in cuts {
            self.truncations.push(Truncation {
                message: index,
                ..cut.truncation.clone()
            });
            self.cut_texts.push(cut.text.clone_ref(py));
        }
        self.infos.push(info);
        self.laid_out.push(output);
    }
}

/// `message` as sent: a plain dict without the metadata keys, with each of
/// `cuts` (`(block, part, text)`) in place of the tool result it caps.
fn lay_out<'py>(
    py: Python<'py>,
    message: &Bound<'py, PyAny>,
    cuts: &[(Option<usize>, Option<usize>, Py<PyString>)],
) -> PyResult<Bound<'py, PyAny>> {
    let source = message.cast::<PyDict>()?;
    let out = PyDict::new(py);
    for (key, value) in source.iter() {
        let metadata = key
            .cast::<PyString>()
            .ok()
            .and_then(|k| k.to_str().ok())
            .is_some_and(|k| select::METADATA_KEYS.contains(&k));
        if !metadata {
            out.set_item(key, value)?;
        }
    }
    for (block, part, text) in cuts {
        match block {
            // An OpenAI tool message: its content, or a text part of it.
            None => put_cut(py, &out, *part, text)?,
            // An Anthropic `tool_result` block, copied with the cut in it.
            Some(block) => {
                let content = content_copy(py, &out)?;
                let result = content.get_item(*block)?.cast::<PyDict>()?.copy()?;
                put_cut(py, &result, *part, text)?;
                content.set_item(*block, result)?;
                out.set_item("content", content)?;
            }
        }
    }
    Ok(out.into_any())
}

/// `holder`'s `content` made `text` (`part` None), or its text part `part`
/// copied with `text` in it, in a copy of the list.
fn put_cut(
    py: Python<'_>,
    holder: &Bound<'_, PyDict>,
    part: Option<usize>,
    text: &Py<PyString>,
) -> PyResult<()> {
    let Some(part) = part else {
        return holder.set_item("content", text);
    };
    let parts = content_copy(py, holder)?;
    let piece = parts.get_item(part)?.cast::<PyDict>()?.copy()?;
    piece.set_item("text", text)?;
    parts.set_item(part, piece)?;
    holder.set_item("content", parts)
}

/// A new list of `holder`'s `content` items (the same objects).
fn content_copy<'py>(py: Python<'py>, holder: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyList>> {
    let items = holder
        .get_item("content")?
        .ok_or_else(no_content)?
        .try_iter()?
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn no_content() -> PyErr {
    invalid_input("a capped tool result has no content")
}

/// How the funnel joins the texts of the neighbours it merges.
const JOIN: &str = "\n\n";

/// Tokens of `sent` (the funnel's answer for `laid_out`, whose exact counts
/// are `known` where known), without the reply priming. A message the
/// funnel kept as it was costs its known count; one that joins a run of
/// laid-out messages of its role is counted from its parts' cached counts,
/// adjusted where they meet (`Tokenizer::count_joined`), plus the message
/// around an empty content: no BPE over a merged text that is new every
/// turn. Any other message (one the funnel changed some other way) is
/// counted whole. The walk keeps its place in `laid_out` by identity, so
/// a message the funnel dropped or added does not lose it.
fn sent_tokens(
    tokenizer: &context_core::Tokenizer,
    laid_out: &[Bound<'_, PyAny>],
    known: &[Option<usize>],
    sent: &Bound<'_, PyList>,
) -> PyResult<usize> {
    let count = |message: &Bound<'_, PyAny>| -> PyResult<usize> {
        tokenizer
            .count_message(&PyJson(message.clone()))
            .map_err(|e| CoreError(e).into())
    };
    let mut at: Option<std::collections::HashMap<usize, usize>> = None;
    let mut total = 0;
    let mut j = 0;
    for message in sent.iter() {
        let own = if laid_out
            .get(j)
            .is_some_and(|own| own.as_ptr() == message.as_ptr())
        {
            Some(j)
        } else {
            let at = at.get_or_insert_with(|| {
                laid_out
                    .iter()
                    .enumerate()
                    .map(|(i, m)| (m.as_ptr() as usize, i))
                    .collect()
            });
            at.get(&(message.as_ptr() as usize)).copied()
        };
        if let Some(i) = own {
            total += match known.get(i).copied().flatten() {
                Some(tokens) => tokens,
                None => count(&message)?,
            };
            j = i + 1;
            continue;
        }
        let Some(parts) = merged_parts(laid_out, j, &message)? else {
            total += count(&message)?;
            continue;
        };
        let mut texts = Vec::with_capacity(parts.len());
        for part in &parts {
            let text = part.to_str()?;
            texts.push((text, Some(crate::key_memo::key_of(part, text))));
        }
        total += match tokenizer.count_joined(&texts) {
            Some(joined) => {
                let around = message.cast::<PyDict>()?.copy()?;
                around.set_item(pyo3::intern!(message.py(), "content"), "")?;
                count(around.as_any())? + joined
            }
            None => count(&message)?,
        };
        j += parts.len();
    }
    Ok(total)
}

/// A dict's `key` as an exact-or-subclass `str` whose text is valid UTF-8.
fn str_field<'py>(
    message: &Bound<'py, PyAny>,
    key: &str,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let Ok(dict) = message.cast::<PyDict>() else {
        return Ok(None);
    };
    Ok(dict
        .get_item(key)?
        .and_then(|value| value.cast_into::<PyString>().ok())
        .filter(|text| text.to_str().is_ok()))
}

/// The contents of the laid-out messages from `j` that `message` joins, if
/// it is exactly that: two or more of its role whose string contents,
/// joined with [`JOIN`], are its content.
fn merged_parts<'py>(
    laid_out: &[Bound<'py, PyAny>],
    j: usize,
    message: &Bound<'py, PyAny>,
) -> PyResult<Option<Vec<Bound<'py, PyString>>>> {
    let (Some(content), Some(role)) = (str_field(message, "content")?, str_field(message, "role")?)
    else {
        return Ok(None);
    };
    let (content, role) = (content.to_str()?, role.to_str()?);
    let mut parts: Vec<Bound<'py, PyString>> = Vec::new();
    let mut rest = content;
    for source in laid_out.iter().skip(j) {
        let same_role =
            str_field(source, "role")?.is_some_and(|r| r.to_str().is_ok_and(|r| r == role));
        let Some(text) = str_field(source, "content")?.filter(|_| same_role) else {
            return Ok(None);
        };
        // Each part but the first follows a join.
        let part = text.to_str()?;
        let after = if parts.is_empty() {
            Some(rest)
        } else {
            rest.strip_prefix(JOIN)
        };
        let Some(after) = after.and_then(|after| after.strip_prefix(part)) else {
            return Ok(None);
        };
        rest = after;
        parts.push(text);
        if rest.is_empty() {
            break;
        }
    }
    Ok((parts.len() >= 2 && rest.is_empty()).then_some(parts))
}
