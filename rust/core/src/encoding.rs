//! Encoding names and the model → encoding table.

use crate::error::{Error, Result};
use crate::pretokenize::Pattern;

/// The OpenAI encodings `context_core` counts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    O200kBase,
    Cl100kBase,
    P50kBase,
    R50kBase,
}

impl Encoding {
    pub const ALL: [Encoding; 4] = [
        Encoding::O200kBase,
        Encoding::Cl100kBase,
        Encoding::P50kBase,
        Encoding::R50kBase,
    ];

    /// tiktoken's name for the encoding.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::P50kBase => "p50k_base",
            Encoding::R50kBase => "r50k_base",
        }
    }

    /// Parse tiktoken's name (`gpt2` is accepted as tiktoken's alias of `r50k_base`).
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "o200k_base" => Ok(Encoding::O200kBase),
            "cl100k_base" => Ok(Encoding::Cl100kBase),
            "p50k_base" => Ok(Encoding::P50kBase),
            "r50k_base" | "gpt2" => Ok(Encoding::R50kBase),
            _ => Err(Error::UnknownEncoding {
                name: name.to_owned(),
                known: Encoding::ALL.iter().map(|e| e.name()).collect(),
            }),
        }
    }

    /// The encoding a model uses: an exact entry first, then the first matching
    /// prefix, as `tiktoken.encoding_for_model` does.
    pub fn for_model(model: &str) -> Result<Self> {
        if let Some(&(_, encoding)) = EXACT_MODELS.iter().find(|(name, _)| *name == model) {
            return Ok(encoding);
        }
        PREFIX_MODELS
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix))
            .map(|&(_, encoding)| encoding)
            .ok_or_else(|| Error::UnknownModel {
                model: model.to_owned(),
                known: known_models(),
            })
    }

    /// The split pattern of the encoding.
    pub fn pattern(self) -> Pattern {
        match self {
            Encoding::O200kBase => Pattern::O200k,
            Encoding::Cl100kBase => Pattern::Cl100k,
            Encoding::P50kBase | Encoding::R50kBase => Pattern::R50k,
        }
    }

    /// Special tokens and their ids, as tiktoken defines them.
    pub fn special_tokens(self) -> &'static [(&'static str, u32)] {
        match self {
            Encoding::O200kBase => &[("<|endoftext|>", 199_999), ("<|endofprompt|>", 200_018)],
            Encoding::Cl100kBase => &[
                ("<|endoftext|>", 100_257),
                ("<|fim_prefix|>", 100_258),
                ("<|fim_middle|>", 100_259),
                ("<|fim_suffix|>", 100_260),
                ("<|endofprompt|>", 100_276),
            ],
            Encoding::P50kBase | Encoding::R50kBase => &[("<|endoftext|>", 50_256)],
        }
    }
}

/// Models matched by their whole name (tiktoken's `MODEL_TO_ENCODING`).
const EXACT_MODELS: &[(&str, Encoding)] = &[
    ("o1", Encoding::O200kBase),
    ("o3", Encoding::O200kBase),
    ("o4-mini", Encoding::O200kBase),
    ("gpt-5", Encoding::O200kBase),
    ("gpt-4.1", Encoding::O200kBase),
    ("gpt-4o", Encoding::O200kBase),
    ("gpt-4", Encoding::Cl100kBase),
    ("gpt-3.5-turbo", Encoding::Cl100kBase),
    ("gpt-3.5", Encoding::Cl100kBase),
    ("gpt-35-turbo", Encoding::Cl100kBase),
    ("davinci-002", Encoding::Cl100kBase),
    ("babbage-002", Encoding::Cl100kBase),
    ("text-embedding-ada-002", Encoding::Cl100kBase),
    ("text-embedding-3-small", Encoding::Cl100kBase),
    ("text-embedding-3-large", Encoding::Cl100kBase),
    ("text-davinci-003", Encoding::P50kBase),
    ("text-davinci-002", Encoding::P50kBase),
    ("code-davinci-002", Encoding::P50kBase),
    ("code-davinci-001", Encoding::P50kBase),
    ("code-cushman-002", Encoding::P50kBase),
    ("code-cushman-001", Encoding::P50kBase),
    ("davinci-codex", Encoding::P50kBase),
    ("cushman-codex", Encoding::P50kBase),
    ("text-davinci-001", Encoding::R50kBase),
    ("text-curie-001", Encoding::R50kBase),
    ("text-babbage-001", Encoding::R50kBase),
    ("text-ada-001", Encoding::R50kBase),
    ("davinci", Encoding::R50kBase),
    ("curie", Encoding::R50kBase),
    ("babbage", Encoding::R50kBase),
    ("ada", Encoding::R50kBase),
    ("text-similarity-davinci-001", Encoding::R50kBase),
    ("text-similarity-curie-001", Encoding::R50kBase),
    ("text-similarity-babbage-001", Encoding::R50kBase),
    ("text-similarity-ada-001", Encoding::R50kBase),
    ("text-search-davinci-doc-001", Encoding::R50kBase),
    ("text-search-curie-doc-001", Encoding::R50kBase),
    ("text-search-babbage-doc-001", Encoding::R50kBase),
    ("text-search-ada-doc-001", Encoding::R50kBase),
    ("code-search-babbage-code-001", Encoding::R50kBase),
    ("code-search-ada-code-001", Encoding::R50kBase),
    ("gpt2", Encoding::R50kBase),
    ("gpt-2", Encoding::R50kBase),
];

/// Model families matched by prefix, in order (tiktoken's `MODEL_PREFIX_TO_ENCODING`,
/// plus `o4-` and `text-embedding-3-`). gpt-oss uses `o200k_harmony`, whose ordinary
/// text encodes exactly as `o200k_base`: only its special tokens differ.
const PREFIX_MODELS: &[(&str, Encoding)] = &[
    ("o1-", Encoding::O200kBase),
    ("o3-", Encoding::O200kBase),
    ("o4-", Encoding::O200kBase),
    ("gpt-5", Encoding::O200kBase),
    ("gpt-4.5-", Encoding::O200kBase),
    ("gpt-4.1-", Encoding::O200kBase),
    ("chatgpt-4o-", Encoding::O200kBase),
    ("gpt-4o-", Encoding::O200kBase),
    ("gpt-4-", Encoding::Cl100kBase),
    ("gpt-3.5-turbo-", Encoding::Cl100kBase),
    ("gpt-35-turbo-", Encoding::Cl100kBase),
    ("gpt-oss-", Encoding::O200kBase),
    ("text-embedding-3-", Encoding::Cl100kBase),
    ("ft:gpt-4o", Encoding::O200kBase),
    ("ft:gpt-4", Encoding::Cl100kBase),
    ("ft:gpt-3.5-turbo", Encoding::Cl100kBase),
    ("ft:davinci-002", Encoding::Cl100kBase),
    ("ft:babbage-002", Encoding::Cl100kBase),
];

/// Every known model name, prefixes shown as `prefix*` (for error messages).
pub fn known_models() -> Vec<String> {
    EXACT_MODELS
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .chain(PREFIX_MODELS.iter().map(|(prefix, _)| format!("{prefix}*")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_resolve_like_tiktoken() {
        let cases = [
            ("gpt-4o", Encoding::O200kBase),
            ("gpt-4o-2024-08-06", Encoding::O200kBase),
            ("gpt-4o-mini", Encoding::O200kBase),
            ("gpt-4.1-nano", Encoding::O200kBase),
            ("gpt-5", Encoding::O200kBase),
            ("gpt-5-mini", Encoding::O200kBase),
            ("o1-preview", Encoding::O200kBase),
            ("o3-mini", Encoding::O200kBase),
            ("o4-mini-2025-04-16", Encoding::O200kBase),
            ("gpt-4", Encoding::Cl100kBase),
            ("gpt-4-0613", Encoding::Cl100kBase),
            ("gpt-4-turbo", Encoding::Cl100kBase),
            ("gpt-3.5-turbo-0125", Encoding::Cl100kBase),
            ("text-embedding-3-small", Encoding::Cl100kBase),
            ("ft:gpt-4o-mini:org::id", Encoding::O200kBase),
            ("text-davinci-003", Encoding::P50kBase),
            ("davinci", Encoding::R50kBase),
        ];
        for (model, encoding) in cases {
            assert_eq!(Encoding::for_model(model), Ok(encoding), "{model}");
        }
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let err = Encoding::for_model("claude-3-5-sonnet").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("claude-3-5-sonnet"), "{text}");
        assert!(text.contains("gpt-4o-*"), "{text}");
        // The binding names its own keyword for a fallback; the core names none.
        assert!(!text.contains("fallback="), "{text}");
    }

    #[test]
    fn names_round_trip() {
        for encoding in Encoding::ALL {
            assert_eq!(Encoding::from_name(encoding.name()), Ok(encoding));
        }
        assert!(Encoding::from_name("o200k").is_err());
    }
}
