//! The core's message readers on arbitrary JSON: chat accounting, tool
//! schemas, analysis (counts, tags, units, truncation), sanitize for both
//! providers, the three selection policies, and the message log's append
//! and read-back. No input may panic or hang; what the log stores must read
//! back byte for byte as the compact JSON of the message.

#![no_main]

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use context_core::log::{AppendOptions, MessageLog, OpenOptions};
use context_core::sanitize::{
    DEFAULT_ERROR_PATTERNS, DEFAULT_MAX_PATTERN_CHARS, DEFAULT_PLACEHOLDER_PATTERNS, Options,
    Patterns, Provider, Sanitizer,
};
use context_core::select::{Extras, Weights, analyze, build, shape, weighted_window};
use context_core::tags::{Keywords, Tagger};
use context_core::{Encoding, Json, JsonValue, Tokenizer};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn convert(value: &Value) -> Json<'static> {
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => Json::Number(n.to_string().into()),
        Value::String(s) => Json::String(s.clone().into()),
        Value::Array(items) => Json::Array(items.iter().map(convert).collect()),
        Value::Object(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (Json::String(k.clone().into()), convert(v)))
                .collect(),
        ),
    }
}

struct Shared {
    tagger: Tagger,
    sanitizers: Vec<Sanitizer>,
    log: Mutex<Option<MessageLog>>,
    dir: PathBuf,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let patterns = || {
            Patterns::new(
                DEFAULT_PLACEHOLDER_PATTERNS,
                DEFAULT_ERROR_PATTERNS,
                DEFAULT_MAX_PATTERN_CHARS,
            )
            .expect("default patterns")
        };
        let sanitizers = [Provider::OpenAi, Provider::Anthropic]
            .into_iter()
            .map(|p| Sanitizer::new(Options::new(p), patterns()).expect("a sanitizer"))
            .collect();
        let dir =
            std::env::temp_dir().join(format!("context-core-fuzz-msg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Shared {
            tagger: Tagger::new(&Keywords::default()).expect("default keywords"),
            sanitizers,
            log: Mutex::new(None),
            dir,
        }
    })
}

/// A log to append to, started afresh now and then so it stays small.
fn with_log(f: impl FnOnce(&mut MessageLog)) {
    let shared = shared();
    let mut guard = shared.log.lock().unwrap();
    if guard
        .as_mut()
        .is_none_or(|log| log.len().unwrap_or(0) > 5_000)
    {
        *guard = None;
        let _ = std::fs::remove_dir_all(&shared.dir);
        let options = OpenOptions {
            create: true,
            durability: context_core::log::Durability::Never,
            ..OpenOptions::default()
        };
        *guard = Some(MessageLog::open(&shared.dir, &options).expect("a scratch log"));
    }
    f(guard.as_mut().unwrap());
}

fuzz_target!(|input: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(input) else {
        return;
    };
    let messages: Vec<Json<'static>> = match &value {
        Value::Array(items) => items.iter().map(convert).collect(),
        other => vec![convert(other)],
    };
    let views: Vec<&Json<'static>> = messages.iter().collect();
    let shared = shared();
    let tokenizer = Tokenizer::new(Encoding::O200kBase);
    let _ = tokenizer.count_messages(&views, None);
    let _ = tokenizer.count_messages(&views[..views.len().min(1)], Some(&views));
    let _ = tokenizer.count_tools(&views);
    for sanitizer in &shared.sanitizers {
        let _ = sanitizer.sanitize(&views);
    }
    for cap in [None, Some(0), Some(8)] {
        let Ok(analysis) = analyze(&views, &tokenizer, Some(&shared.tagger), cap) else {
            continue;
        };
        for budget in [0, 64, 4_096, usize::MAX / 4] {
            let _ = weighted_window(&analysis, budget, &Weights::default(), 3, 3, Some(1.7e9));
            let _ = weighted_window(
                &analysis,
                budget,
                &Weights::default(),
                usize::MAX,
                usize::MAX,
                None,
            );
            let _ = shape(&analysis, budget, 20, 3, Some(10));
            let _ = shape(&analysis, budget, usize::MAX, usize::MAX, None);
            let extras = Extras {
                global: Some(20),
                memories: vec![5, 50],
                segments: vec![7],
                anchoring: Some(3),
            };
            let _ = build(&analysis, budget, &extras);
        }
    }
    with_log(|log| {
        for message in &views {
            let exact = message.to_compact_exact();
            // A refusal (not a message dict, or not JSON it could give back
            // exactly) is fine; what is stored must read back as given.
            if let Ok(seq) = log.append(message, &AppendOptions::default(), &shared.tagger) {
                let stored = log
                    .read(&[seq as i64])
                    .expect("an appended message reads back");
                let exact = exact.expect("what was stored has an exact form");
                assert_eq!(stored[0], exact.into_bytes(), "stored as given");
            }
        }
        let _ = log.append_many(&views, &shared.tagger);
    });
});
