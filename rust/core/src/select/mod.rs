//! Context selection: given a history and a token budget, choose what the
//! model sees. One analysis (exact counts, tags, units), three policies:
//! ShapeHistory, the weighted window and the priority builder.

mod analyze;
mod policies;

pub use analyze::{
    Analysis, METADATA_KEYS, MessageInfo, Role, TRUNCATION_MARKER, Truncation, Unit, UnitFacts,
    UnitKind, analyze, analyze_message, assemble, for_each_unit, for_each_unit_from, group_units,
    read_message,
};
pub use policies::{
    Build, DEFAULT_RECENT_TURNS, DEFAULT_TAG_DECAY, Extras, Shape, ShapeUnits, Walked, Weights,
    build, build_extras, decayed, fill_by_weight, greedy_by_weight, message_weight, recent_fits,
    recent_from, shape, shape_of, shape_units, tag_weight, weight_key, weighted_window,
};
