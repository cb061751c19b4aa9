//! Task presets: starting points chosen by what one unlikely token costs.
//!
//! No setting suits every task. A wrong token in a poem is a different word; a wrong token in a JSON
//! tool call is a failed parse. Each preset is a full [`SamplingParams`] built from llama.cpp's
//! defaults with a few fields changed; a request that names a preset (`"preset": "code"`) starts
//! from it and overrides whatever else it sets. The values are examples of a direction, not
//! recommendations from a model card: when a model card lists sampling values, use those.
//!
//! | preset | temperature | truncation | repetition controls |
//! |---|---|---|---|
//! | `json` | 0 (argmax) | llama.cpp defaults | none; JSON delimiters exempt if a penalty is added |
//! | `code` | 0.2 | top-k 40, top-p 0.95, min-p 0.05 | none |
//! | `chat` | 0.8 | llama.cpp defaults | `normalized` repeat penalty 1.1 over 64 tokens |
//! | `creative` | 1.2 | min-p 0.1 only | DRY 0.8/1.75/2, XTC 0.5/0.1 |
//! | `llama-cpp-default` | 0.8 | top-k 40, top-p 0.95, min-p 0.05 | none (llama.cpp's defaults) |

use crate::error::{Result, SamplingError};
use crate::params::{SamplingParams, TokenRef};
use crate::samplers::penalties::PenaltyMode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A named starting point for [`SamplingParams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Tool calls and JSON: one unlikely token is a parse failure. Temperature 0 picks the argmax
    /// (through llama.cpp's `temp-ext` mask, so the chain stays llama.cpp's), and there is no
    /// repetition penalty because keys, quotes and braces must repeat. The JSON delimiters
    /// `{ } [ ] : , "` are listed in `penalty_exempt`, so a penalty added on top of this preset
    /// never pushes the model off a delimiter (resolving them needs a vocabulary).
    Json,
    /// Code: identifiers legitimately repeat, so no repeat penalty or DRY; a low temperature (0.2)
    /// with top-p and min-p cutting the tail keeps wrong identifiers out while allowing near-ties.
    Code,
    /// Chat: llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) plus a mild
    /// repeat penalty (1.1 over the last 64 tokens) in `normalized` mode, which penalises a seen
    /// token by the same fraction of its log-probability on every model, instead of depending on
    /// where the model's raw logits sit relative to 0.
    Chat,
    /// Brainstorming and fiction: variety is the goal. A higher temperature (1.2) with min-p 0.1 as
    /// the only filter (it scales with the top probability, so the tail stays cut at any
    /// temperature), DRY (0.8, 1.75, 2) against verbatim loops and XTC (0.5, 0.1) against the most
    /// predictable continuation. DRY's default string breakers need a vocabulary.
    Creative,
    /// Exactly llama.cpp's `common_params_sampling` defaults.
    LlamaCppDefault,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 5] = [
        Preset::Json,
        Preset::Code,
        Preset::Chat,
        Preset::Creative,
        Preset::LlamaCppDefault,
    ];

    /// The name used in requests and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Json => "json",
            Preset::Code => "code",
            Preset::Chat => "chat",
            Preset::Creative => "creative",
            Preset::LlamaCppDefault => "llama-cpp-default",
        }
    }

    /// The full parameter set of this preset (with `preset` set to it).
    pub fn params(self) -> SamplingParams {
        let mut p = SamplingParams {
            preset: Some(self),
            ..SamplingParams::default()
        };
        match self {
            Preset::Json => {
                p.temperature = 0.0;
                p.penalty_exempt = ["{", "}", "[", "]", ":", ",", "\""]
                    .iter()
                    .map(|s| TokenRef::Text(s.to_string()))
                    .collect();
            }
            Preset::Code => {
                p.temperature = 0.2;
            }
            Preset::Chat => {
                p.repeat_penalty = 1.1;
                p.repeat_last_n = 64;
                p.repeat_penalty_mode = PenaltyMode::Normalized;
            }
            Preset::Creative => {
                p.temperature = 1.2;
                p.top_k = 0;
                p.top_p = 1.0;
                p.min_p = 0.1;
                p.dry_multiplier = 0.8;
                p.dry_base = 1.75;
                p.dry_allowed_length = 2;
                p.xtc_probability = 0.5;
                p.xtc_threshold = 0.1;
            }
            Preset::LlamaCppDefault => {}
        }
        p
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Preset {
    type Err = SamplingError;
    /// Case-insensitive; `_` and `-` are interchangeable, and `default`/`llamacpp` name the defaults.
    fn from_str(s: &str) -> Result<Preset> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        match norm.as_str() {
            "json" => Ok(Preset::Json),
            "code" => Ok(Preset::Code),
            "chat" => Ok(Preset::Chat),
            "creative" => Ok(Preset::Creative),
            "llama-cpp-default" | "llamacpp-default" | "llamacpp" | "llama-cpp" | "default" => {
                Ok(Preset::LlamaCppDefault)
            }
            _ => Err(SamplingError::param(
                "preset",
                format!("{s:?}"),
                "json, code, chat, creative or llama-cpp-default",
            )),
        }
    }
}

impl Serialize for Preset {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Preset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_validates_and_round_trips_by_name() {
        for p in Preset::ALL {
            p.params().validate(32000).unwrap();
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
    }

    #[test]
    fn llama_cpp_default_is_the_plain_default() {
        let p = Preset::LlamaCppDefault.params();
        assert_eq!(
            SamplingParams { preset: None, ..p },
            SamplingParams::default()
        );
    }
}
