//! Sampler names and letters: llama.cpp's `--samplers` / `--sampler-seq` vocabulary.
//!
//! The `samplers` list of a request (or the CLI) names the *slots* of the chain, in order. A slot is
//! a [`SamplerType`]; the chain builder turns each slot into the stage llama.cpp's
//! `common_sampler_init` would create (the `temperature` slot becomes `temp-ext`, `typ_p` becomes
//! `typical`, and `adaptive_p` only swaps the terminal sampler).
//!
//! Names follow llama.cpp exactly: case-insensitive, the canonical snake_case names, their kebab form
//! (`top-k`), their form without separators (`topk`), and the extra aliases `nucleus`, `temp` and
//! `typ`. Letters are `edskypmxtia`.
//!
//! **Deliberate deviation:** llama.cpp drops unknown names and letters with a warning and builds the
//! chain from whatever is left, so a typo such as `top_kk` silently removes top-k from the chain.
//! gauge returns [`SamplingError::UnknownSampler`] / [`SamplingError::UnknownSamplerLetter`]
//! instead: a chain that differs from what the user wrote is worse than an error.
//!
//! `infill` is recognised (so it is not reported as a typo) but gauge has no infill sampler: the
//! chain builder rejects it with a [`SamplingError::Param`] error naming `samplers`.

use crate::error::{Result, SamplingError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One slot of the chain, as named in llama.cpp's `common_sampler_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplerType {
    /// `penalties` (letter `e`): repeat, frequency and presence penalties.
    Penalties,
    /// `dry` (letter `d`).
    Dry,
    /// `top_n_sigma` (letter `s`).
    TopNSigma,
    /// `top_k` (letter `k`).
    TopK,
    /// `typ_p` (letter `y`): locally typical sampling, runtime name `typical`.
    TypicalP,
    /// `top_p` (letter `p`).
    TopP,
    /// `min_p` (letter `m`).
    MinP,
    /// `xtc` (letter `x`).
    Xtc,
    /// `temperature` (letter `t`): the `temp-ext` stage.
    Temperature,
    /// `infill` (letter `i`): recognised, not supported by gauge.
    Infill,
    /// `adaptive_p` (letter `a`): replaces the terminal `dist` with `adaptive-p`.
    AdaptiveP,
}

/// llama.cpp's default `samplers` (common.h): `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`.
pub const DEFAULT_ORDER: [SamplerType; 9] = [
    SamplerType::Penalties,
    SamplerType::Dry,
    SamplerType::TopNSigma,
    SamplerType::TopK,
    SamplerType::TypicalP,
    SamplerType::TopP,
    SamplerType::MinP,
    SamplerType::Xtc,
    SamplerType::Temperature,
];

/// The default order as letters.
pub const DEFAULT_LETTERS: &str = "edskypmxt";

/// Every slot type, in llama.cpp's enum order.
pub const ALL: [SamplerType; 11] = [
    SamplerType::Penalties,
    SamplerType::Dry,
    SamplerType::TopNSigma,
    SamplerType::TopK,
    SamplerType::TypicalP,
    SamplerType::TopP,
    SamplerType::MinP,
    SamplerType::Xtc,
    SamplerType::Temperature,
    SamplerType::Infill,
    SamplerType::AdaptiveP,
];

impl SamplerType {
    /// The canonical `--samplers` name (snake_case).
    pub fn canonical_name(self) -> &'static str {
        match self {
            SamplerType::Penalties => "penalties",
            SamplerType::Dry => "dry",
            SamplerType::TopNSigma => "top_n_sigma",
            SamplerType::TopK => "top_k",
            SamplerType::TypicalP => "typ_p",
            SamplerType::TopP => "top_p",
            SamplerType::MinP => "min_p",
            SamplerType::Xtc => "xtc",
            SamplerType::Temperature => "temperature",
            SamplerType::Infill => "infill",
            SamplerType::AdaptiveP => "adaptive_p",
        }
    }

    /// The `--sampler-seq` letter.
    pub fn letter(self) -> char {
        match self {
            SamplerType::Penalties => 'e',
            SamplerType::Dry => 'd',
            SamplerType::TopNSigma => 's',
            SamplerType::TopK => 'k',
            SamplerType::TypicalP => 'y',
            SamplerType::TopP => 'p',
            SamplerType::MinP => 'm',
            SamplerType::Xtc => 'x',
            SamplerType::Temperature => 't',
            SamplerType::Infill => 'i',
            SamplerType::AdaptiveP => 'a',
        }
    }

    /// Parse one name: case-insensitive, canonical, kebab, separator-free, or an extra alias.
    pub fn from_name(name: &str) -> Result<SamplerType> {
        let lower = name.to_ascii_lowercase();
        // llama.cpp builds its alias table from the canonical names: each name containing `_` also
        // gets its kebab form and its form without separators. Comparing after mapping `-` to `_`
        // and after removing `_` covers exactly those two derived forms.
        for t in ALL {
            let canon = t.canonical_name();
            if lower == canon
                || (canon.contains('_')
                    && (lower == canon.replace('_', "-") || lower == canon.replace('_', "")))
            {
                return Ok(t);
            }
        }
        match lower.as_str() {
            "nucleus" => Ok(SamplerType::TopP),
            "temp" => Ok(SamplerType::Temperature),
            "typ" => Ok(SamplerType::TypicalP),
            _ => Err(SamplingError::UnknownSampler(name.to_string())),
        }
    }

    /// Parse one `--sampler-seq` letter (lower case only, as llama.cpp).
    pub fn from_letter(c: char) -> Result<SamplerType> {
        ALL.into_iter()
            .find(|t| t.letter() == c)
            .ok_or(SamplingError::UnknownSamplerLetter(c))
    }
}

impl std::fmt::Display for SamplerType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.canonical_name())
    }
}

impl std::str::FromStr for SamplerType {
    type Err = SamplingError;
    fn from_str(s: &str) -> Result<Self> {
        SamplerType::from_name(s)
    }
}

impl Serialize for SamplerType {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.canonical_name())
    }
}

impl<'de> Deserialize<'de> for SamplerType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SamplerType::from_name(&s).map_err(serde::de::Error::custom)
    }
}

/// Parse a list of names (`--samplers a;b;c` split on `;`, or a server `samplers` array).
/// Repeats are kept: each occurrence becomes its own stage, as in llama.cpp.
pub fn parse_names<S: AsRef<str>>(names: &[S]) -> Result<Vec<SamplerType>> {
    names
        .iter()
        .map(|n| SamplerType::from_name(n.as_ref()))
        .collect()
}

/// Parse a `--sampler-seq` string (`edskypmxt`). Unknown letters are an error (llama.cpp drops them).
pub fn parse_letters(letters: &str) -> Result<Vec<SamplerType>> {
    letters.chars().map(SamplerType::from_letter).collect()
}

/// The letters of an order (inverse of [`parse_letters`]).
pub fn to_letters(order: &[SamplerType]) -> String {
    order.iter().map(|t| t.letter()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_letters_match_default_order() {
        assert_eq!(
            parse_letters(DEFAULT_LETTERS).unwrap(),
            DEFAULT_ORDER.to_vec()
        );
        assert_eq!(to_letters(&DEFAULT_ORDER), DEFAULT_LETTERS);
    }

    #[test]
    fn derived_aliases_exist_only_for_names_with_underscores() {
        assert_eq!(
            SamplerType::from_name("Top-N-Sigma").unwrap(),
            SamplerType::TopNSigma
        );
        assert_eq!(
            SamplerType::from_name("TOPNSIGMA").unwrap(),
            SamplerType::TopNSigma
        );
        assert_eq!(
            SamplerType::from_name("adaptivep").unwrap(),
            SamplerType::AdaptiveP
        );
        assert_eq!(
            SamplerType::from_name("typ").unwrap(),
            SamplerType::TypicalP
        );
        // `typical` is only the runtime stage name, never a `--samplers` alias.
        assert!(SamplerType::from_name("typical").is_err());
        assert!(SamplerType::from_name("temp-ext").is_err());
    }
}
