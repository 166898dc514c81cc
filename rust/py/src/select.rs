//! The selection kernel's Python face: `Tagger`, and `_analyze` with the
//! policies on its result. `context_core.select` lays the output out.

use std::sync::LazyLock;

use context_core::select::{self, Analysis, Extras, UnitKind, Weights};
use context_core::tags::{self, Keywords, Tagger};
use pyo3::prelude::*;

use crate::errors::{CoreError, invalid_input};
use crate::json::PyJson;
use crate::text::{as_count, sequence, text};
use crate::tokenizer::PyTokenizer;

/// The tagger with the default keyword lists.
pub static DEFAULT_TAGGER: LazyLock<Tagger> =
    LazyLock::new(|| Tagger::new(&Keywords::default()).expect("the default keywords compile"));

/// Tags texts `constraint`, `evidence`, `pulse` and `log` by keyword lists.
#[pyclass(frozen, name = "Tagger", module = "context_core")]
pub struct PyTagger {
    inner: Option<Tagger>,
}

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
    #[pyo3(signature = (*, constraint_keywords = None, pulse_keywords = None, evidence_markers = None, log_markers = None))]
    fn new(
        constraint_keywords: Option<&Bound<'_, PyAny>>,
        pulse_keywords: Option<&Bound<'_, PyAny>>,
        evidence_markers: Option<&Bound<'_, PyAny>>,
        log_markers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let given = [
            constraint_keywords,
            pulse_keywords,
            evidence_markers,
            log_markers,
        ];
        if given.iter().all(|g| g.is_none_or(PyAnyMethods::is_none)) {
            return Ok(Self { inner: None });
        }
        let keywords = Keywords {
            constraint: keyword_list(
                constraint_keywords,
                "constraint_keywords",
                tags::DEFAULT_CONSTRAINT_KEYWORDS,
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
        })
    }

    /// The tags whose keywords occur in `text`.
    fn tag(&self, text_value: &Bound<'_, PyAny>) -> PyResult<Vec<&'static str>> {
        let text_value = text(text_value, "text")?;
        Ok(tags::names(self.get().tag(&text_value)))
    }
}

/// `(message, block, part, text, before, after)` of a capped tool result.
type TruncationRow<'a> = (usize, Option<usize>, Option<usize>, &'a str, usize, usize);
/// `(units, global, anchoring, memories, segments)` the builder keeps.
type BuildRow = (Vec<usize>, bool, bool, Vec<usize>, Vec<usize>);

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
    fn truncations(&self) -> Vec<TruncationRow<'_>> {
        self.inner
            .truncations
            .iter()
            .map(|t| (t.message, t.block, t.part, &*t.text, t.before, t.after))
            .collect()
    }

    /// Tokens of every message together.
    #[getter]
    fn total_tokens(&self) -> usize {
        self.inner.total_tokens()
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
                let unit = self
                    .inner
                    .units
                    .get(u)
                    .ok_or_else(|| invalid_input(format!("no unit {u}")))?;
                Ok((unit.start, unit.end, unit.tokens, kind_name(unit.kind)))
            })
            .collect()
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

    /// `(units, global, anchoring, memories, segments)` the builder keeps.
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
        Ok((
            built.units,
            built.global,
            built.anchoring,
            built.memories,
            built.segments,
        ))
    }
}

/// Read `messages` for selection: exact counts, tool results capped at `cap`
/// tokens, tags (given, and found unless `find_tags` is false) and units.
#[pyfunction]
#[pyo3(signature = (messages, tokenizer, tagger = None, cap = None, find_tags = true))]
pub fn _analyze(
    messages: &Bound<'_, PyAny>,
    tokenizer: &Bound<'_, PyTokenizer>,
    tagger: Option<&Bound<'_, PyTagger>>,
    cap: Option<usize>,
    find_tags: bool,
) -> PyResult<PyAnalysis> {
    let views: Vec<PyJson<'_>> = sequence(messages, "messages")?
        .into_iter()
        .map(PyJson)
        .collect();
    let tagger = tagger.map(Bound::get);
    let tagger = tagger.map_or(&*DEFAULT_TAGGER, PyTagger::get);
    let tagger = find_tags.then_some(tagger);
    let inner = select::analyze(&views, tokenizer.get().inner(), tagger, cap).map_err(CoreError)?;
    Ok(PyAnalysis { inner })
}
