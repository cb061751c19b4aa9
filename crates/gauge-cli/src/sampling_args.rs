//! llama.cpp-style sampling flags, shared by `chain`, `generate` and `replay`.
//!
//! Flags are turned into a JSON object with llama-server field names and layered over a preset and a
//! `--params` file (preset < file < flags), then deserialised and validated by
//! `gauge_sampling::params::SamplingParams`. Going through the request format keeps one source of
//! truth for names, aliases and ranges: a flag means exactly what the same request field means.

use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::{DefaultUse, Model};
use gauge_sampling::fields;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::presets::Preset;
use serde_json::{Map, Value};

/// Sampling flags (llama.cpp names).
#[derive(Args, Debug, Clone, Default)]
pub struct SamplingArgs {
    /// JSON file with request fields (llama-server / OpenAI names), or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub params: Option<String>,
    /// Start from a task preset: json, code, chat, creative, llama-cpp-default.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Refuse fields gauge does not know: in the --params file (by default they are listed on
    /// stderr and ignored) and, under `gauge serve`, in requests (by default accepted and listed
    /// in the response under `gauge.unknown_fields`).
    #[arg(long)]
    pub strict: bool,
    /// Temperature (0 = argmax; 1 = off).
    #[arg(long, visible_alias = "temperature", allow_negative_numbers = true)]
    pub temp: Option<f64>,
    /// Top-k (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub top_k: Option<i64>,
    /// Top-p / nucleus (1 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub top_p: Option<f64>,
    /// Min-p (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub min_p: Option<f64>,
    /// Locally typical sampling p (1 = off).
    #[arg(long, visible_alias = "typical-p", allow_negative_numbers = true)]
    pub typical: Option<f64>,
    /// Repeat penalty θ (1 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub repeat_penalty: Option<f64>,
    /// Penalty window in tokens (0 = off, -1 = whole history).
    #[arg(long, allow_negative_numbers = true)]
    pub repeat_last_n: Option<i64>,
    /// `ctrl` (llama.cpp's sign branch on raw logits) or `normalized` (log-softmax first).
    #[arg(long, value_name = "ctrl|normalized")]
    pub repeat_penalty_mode: Option<String>,
    /// Presence penalty α (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub presence_penalty: Option<f64>,
    /// Frequency penalty (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub frequency_penalty: Option<f64>,
    /// DRY multiplier (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub dry_multiplier: Option<f64>,
    /// DRY base.
    #[arg(long, allow_negative_numbers = true)]
    pub dry_base: Option<f64>,
    /// DRY allowed length.
    #[arg(long, allow_negative_numbers = true)]
    pub dry_allowed_length: Option<i64>,
    /// DRY window (0 = off, -1 = whole history).
    #[arg(long, allow_negative_numbers = true)]
    pub dry_penalty_last_n: Option<i64>,
    /// DRY sequence breaker (repeatable; the first use replaces the defaults; `none` = no breakers).
    #[arg(long, value_name = "STR")]
    pub dry_sequence_breaker: Vec<String>,
    /// XTC probability (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub xtc_probability: Option<f64>,
    /// XTC threshold (> 0.5 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub xtc_threshold: Option<f64>,
    /// Top-n-sigma (<= 0 = off).
    #[arg(long, visible_alias = "top-nsigma", allow_negative_numbers = true)]
    pub top_n_sigma: Option<f64>,
    /// Mirostat: 0 off, 1 v1, 2 v2.
    #[arg(long, allow_negative_numbers = true)]
    pub mirostat: Option<i64>,
    /// Mirostat learning rate η.
    #[arg(long, allow_negative_numbers = true)]
    pub mirostat_lr: Option<f64>,
    /// Mirostat target entropy τ.
    #[arg(long, allow_negative_numbers = true)]
    pub mirostat_ent: Option<f64>,
    /// Dynamic temperature range (0 = off).
    #[arg(long, allow_negative_numbers = true)]
    pub dynatemp_range: Option<f64>,
    /// Dynamic temperature exponent.
    #[arg(long, allow_negative_numbers = true)]
    pub dynatemp_exp: Option<f64>,
    /// Sampler order as names separated by `;` (e.g. `top_k;top_p;temperature`).
    #[arg(long, value_name = "NAMES")]
    pub samplers: Option<String>,
    /// Sampler order as letters (e.g. `edskypmxt`).
    #[arg(long, visible_alias = "sampling-seq", value_name = "LETTERS")]
    pub sampler_seq: Option<String>,
    /// Logit bias `TOKEN(+|-)BIAS`, e.g. `15043+1` or `15043-inf` (repeatable).
    #[arg(
        short = 'l',
        long,
        value_name = "TOKEN(+|-)BIAS",
        allow_hyphen_values = true
    )]
    pub logit_bias: Vec<String>,
    /// Minimum candidates kept by top-p, min-p, typical and XTC.
    #[arg(long)]
    pub min_keep: Option<i64>,
    /// RNG seed (-1 = random).
    #[arg(short = 's', long, allow_negative_numbers = true)]
    pub seed: Option<i64>,
}

/// Parse one `--logit-bias` value: `TOKEN` then a sign then the magnitude (`15043+1`, `15043-inf`).
pub fn parse_logit_bias(s: &str) -> Result<(i64, f64)> {
    let pos = s
        .char_indices()
        .skip(1)
        .find(|(_, c)| *c == '+' || *c == '-')
        .map(|(i, _)| i)
        .with_context(|| {
            format!("--logit-bias {s:?}: expected TOKEN+BIAS or TOKEN-BIAS, e.g. 15043+1")
        })?;
    let (tok, rest) = s.split_at(pos);
    let token: i64 = tok
        .trim()
        .parse()
        .with_context(|| format!("--logit-bias {s:?}: token id {tok:?} is not an integer"))?;
    let bias: f64 = rest
        .parse()
        .with_context(|| format!("--logit-bias {s:?}: bias {rest:?} is not a number"))?;
    if bias.is_nan() {
        bail!("--logit-bias {s:?}: bias is NaN");
    }
    Ok((token, bias))
}

fn read_params_file(spec: &str) -> Result<Value> {
    let text = if spec == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading --params from stdin")?;
        s
    } else {
        std::fs::read_to_string(spec).with_context(|| format!("reading --params file {spec}"))?
    };
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("--params {spec}: malformed JSON"))?;
    if !v.is_object() {
        bail!(
            "--params {spec}: expected a JSON object of request fields, got {}",
            kind(&v)
        );
    }
    Ok(v)
}

/// Set `k` in a layer above the ones already in `obj`: the other names of the same setting
/// (`temp` under `temperature`, `max_tokens` under `n_predict`) are overridden too, not left to
/// conflict with it.
fn put(obj: &mut Map<String, Value>, k: &str, v: Value) {
    clear_setting(obj, k);
    obj.insert(k.to_string(), v);
}

/// Remove every name of the setting `k` names.
fn clear_setting(obj: &mut Map<String, Value>, k: &str) {
    match fields::field(k) {
        Some(f) => f.names().for_each(|n| {
            obj.remove(n);
        }),
        None => {
            obj.remove(k);
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl SamplingArgs {
    /// The request object these flags describe, layered over the preset and the params file.
    pub fn to_json(&self) -> Result<Map<String, Value>> {
        let mut obj = Map::new();
        if let Some(name) = &self.preset {
            let preset: Preset = name.parse().map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
            let v = serde_json::to_value(preset.params())?;
            if let Value::Object(m) = v {
                obj.extend(m);
            }
        }
        if let Some(spec) = &self.params {
            if let Value::Object(m) = read_params_file(spec)? {
                // The file overrides the preset's names of each setting it mentions; names
                // within the file itself must agree (checked when the request is parsed).
                for k in m.keys() {
                    clear_setting(&mut obj, k);
                }
                obj.extend(m);
            }
        }
        let mut set = |k: &str, v: Value| put(&mut obj, k, v);
        macro_rules! num {
            ($field:ident, $key:expr) => {
                if let Some(x) = self.$field {
                    set($key, serde_json::json!(x));
                }
            };
        }
        num!(temp, "temperature");
        num!(top_k, "top_k");
        num!(top_p, "top_p");
        num!(min_p, "min_p");
        num!(typical, "typical_p");
        num!(repeat_penalty, "repeat_penalty");
        num!(repeat_last_n, "repeat_last_n");
        num!(presence_penalty, "presence_penalty");
        num!(frequency_penalty, "frequency_penalty");
        num!(dry_multiplier, "dry_multiplier");
        num!(dry_base, "dry_base");
        num!(dry_allowed_length, "dry_allowed_length");
        num!(dry_penalty_last_n, "dry_penalty_last_n");
        num!(xtc_probability, "xtc_probability");
        num!(xtc_threshold, "xtc_threshold");
        num!(top_n_sigma, "top_n_sigma");
        num!(mirostat, "mirostat");
        num!(mirostat_lr, "mirostat_eta");
        num!(mirostat_ent, "mirostat_tau");
        num!(dynatemp_range, "dynatemp_range");
        num!(dynatemp_exp, "dynatemp_exponent");
        num!(min_keep, "min_keep");
        num!(seed, "seed");
        if let Some(m) = &self.repeat_penalty_mode {
            set("repeat_penalty_mode", Value::String(m.clone()));
        }
        if !self.dry_sequence_breaker.is_empty() {
            let list: Vec<Value> = if self.dry_sequence_breaker.iter().any(|b| b == "none") {
                vec![]
            } else {
                self.dry_sequence_breaker
                    .iter()
                    .map(|b| Value::String(b.clone()))
                    .collect()
            };
            set("dry_sequence_breakers", Value::Array(list));
        }
        if self.samplers.is_some() && self.sampler_seq.is_some() {
            bail!("--samplers and --sampler-seq both given: use one");
        }
        if let Some(names) = &self.samplers {
            let list = names
                .split(';')
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect();
            set("samplers", Value::Array(list));
        }
        if let Some(letters) = &self.sampler_seq {
            set("samplers", Value::String(letters.clone()));
        }
        if !self.logit_bias.is_empty() {
            let mut pairs = Vec::new();
            for s in &self.logit_bias {
                let (tok, bias) = parse_logit_bias(s)?;
                let b = if bias == f64::NEG_INFINITY {
                    Value::Bool(false)
                } else {
                    serde_json::json!(bias)
                };
                pairs.push(Value::Array(vec![serde_json::json!(tok), b]));
            }
            set("logit_bias", Value::Array(pairs));
        }
        Ok(obj)
    }

    /// Deserialize and validate into `SamplingParams`.
    pub fn to_params(&self) -> Result<SamplingParams> {
        params_of(&self.layer()?)
    }

    /// The request object the user gave (preset, params file, flags), its unknown fields listed
    /// (or refused with `--strict`) and its fields type-checked: read once (`--params -` reads
    /// stdin), then [`params_of`] or [`params_for_model`].
    pub fn layer(&self) -> Result<Map<String, Value>> {
        let obj = self.to_json()?;
        let unknown = fields::unknown_fields(&obj, &[]);
        if !unknown.is_empty() {
            let list = unknown.join("`, `");
            if self.strict {
                bail!("--params: unknown field(s) `{list}` (--strict refuses fields gauge does not know)");
            }
            eprintln!(
                "gauge: --params: ignoring unknown field(s) `{list}` (--strict refuses them)"
            );
        }
        params_of(&obj)?;
        Ok(obj)
    }
}

/// The params a request object describes.
pub fn params_of(obj: &Map<String, Value>) -> Result<SamplingParams> {
    SamplingParams::from_value(&Value::Object(obj.clone()))
        .map_err(|e| anyhow::anyhow!("sampling parameters: {e}"))
}

/// The params for a run on `model`, with the model's own sampling defaults.
pub struct ModelParams {
    pub params: SamplingParams,
    /// What became of each of the model's GGUF defaults.
    pub uses: Vec<DefaultUse>,
    /// `uses` as text for a chain print, with the repeat-penalty note and the warnings.
    pub lines: Vec<String>,
    /// The repeat-penalty note, when the model sets `penalty_repeat`.
    pub notes: Vec<String>,
    /// Keys of the model that could not be used.
    pub warnings: Vec<String>,
}

impl ModelParams {
    /// `{"defaults": [...], "notes": [...], "warnings": [...]}` for JSON output.
    pub fn json(&self) -> Value {
        serde_json::json!({
            "defaults": self.uses,
            "notes": self.notes,
            "warnings": self.warnings,
        })
    }
}

/// The user's `layer` over `model`'s GGUF sampling defaults (`general.sampling.*`): each
/// default applies where the preset, the params file and the flags leave its field unset, as
/// llama.cpp applies them where no flag was given. `name` is how the user named the model (for
/// the `gauge calibrate` pointer).
pub fn params_for_model(
    layer: &Map<String, Value>,
    model: &Model,
    name: &str,
) -> Result<ModelParams> {
    let defaults = model.sampling_defaults();
    let (obj, uses) = defaults.apply(layer, "the command line");
    let params = params_of(&obj)?;
    let lines = defaults.describe(&uses, name);
    Ok(ModelParams {
        params,
        uses,
        lines,
        notes: defaults.penalty_note(name).into_iter().collect(),
        warnings: defaults.warnings.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_flag_forms() {
        assert_eq!(parse_logit_bias("15043+1").unwrap(), (15043, 1.0));
        assert_eq!(parse_logit_bias("15043-1.5").unwrap(), (15043, -1.5));
        assert_eq!(parse_logit_bias("15043-inf").unwrap().1, f64::NEG_INFINITY);
        assert!(parse_logit_bias("abc+1")
            .unwrap_err()
            .to_string()
            .contains("not an integer"));
        assert!(parse_logit_bias("15043").is_err());
    }
}
