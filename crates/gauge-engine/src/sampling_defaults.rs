//! A model's own sampling defaults: the `general.sampling.*` keys of its GGUF, read and applied
//! the way llama.cpp's `common_init_sampler_from_model` (common/common.cpp) does.
//!
//! llama.cpp reads twelve keys (names in src/llama-arch.cpp) and sets each into the sampling
//! parameters unless the user set that field on the command line (`user_sampling_config`, one bit
//! per field, set by `--samplers`, `--top-k`, `--top-p`, `--min-p`, `--xtc-probability`,
//! `--xtc-threshold`, `--temp`, `--repeat-last-n`, `--repeat-penalty`, `--mirostat`,
//! `--mirostat-ent`, `--mirostat-lr`). llama-server starts every request from those parameters,
//! so a request field overrides them too. gauge keeps the same order: built-in defaults < the
//! model's keys < the command line or `gauge serve`'s flags < the request
//! ([`ModelSamplingDefaults::apply`]).
//!
//! **How a value is read, exactly as llama.cpp.** llama.cpp stores every non-array key as text
//! (`gguf_kv_to_str`: integers in decimal, floats as `%f`, booleans as `true`/`false`, strings as
//! they are), copies it into a buffer of 64 bytes for an integer key, 128 for a float key and 512
//! for the sequence, and parses it with `strtol` / `strtof`: a value that parses as a number
//! (whatever its GGUF type, a string `"7"` included) is used, leading digits only (`"7.5"` is 7
//! for an integer key); a value that does not (`true`, `"abc"`) is ignored. An array key is not
//! seen at all. `sequence` is split on `;` into `--samplers` names (case-insensitive, with
//! llama.cpp's aliases); llama.cpp drops unknown names with a warning, and so does gauge here
//! (a model file is not the user's input to correct), listing each dropped name.
//!
//! **Where gauge differs.** A value gauge's [`SamplingParams::validate`] would refuse (`top_p`
//! 1.5, `mirostat` 3, a non-finite float, `repeat_penalty` 0) is ignored with a warning instead
//! of making every request fail; a negative `temp` is read as 0, the greedy sampler llama.cpp
//! runs for any temperature <= 0; `infill` in the sequence is dropped with a warning (gauge has
//! no infill stage). llama.cpp's `--sampler-seq` does not mark the sequence as set (only
//! `--samplers` does), so there a model's sequence replaces it; gauge counts both flags.
//! With `repeat_penalty_mode: "normalized"` and no `repeat_penalty`, the model's
//! `penalty_repeat` is not applied: it is a ctrl θ (the sign-branched multiplicative penalty on
//! raw logits), and a normalized θ′ with the same effect is what `gauge calibrate` measures.

use gauge_sampling::fields;
use gauge_sampling::order::SamplerType;
use gauge_sampling::params::SamplingParams;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a key holds, which picks llama.cpp's buffer size and parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `strtol`, 64-byte buffer.
    Int,
    /// `strtof`, 128-byte buffer.
    Float,
    /// `;`-separated sampler names, 512-byte buffer.
    Sequence,
}

impl Kind {
    fn buf_size(self) -> usize {
        match self {
            Kind::Int => 64,
            Kind::Float => 128,
            Kind::Sequence => 512,
        }
    }
}

/// One key llama.cpp reads: the GGUF key, and the llama.cpp flag whose use makes llama.cpp skip
/// it. The request field it sets is the row of gauge's table of fields with this key
/// ([`fields::Field::gguf`]).
#[derive(Clone, Copy, Debug)]
pub struct SamplingKey {
    pub key: &'static str,
    pub flag: &'static str,
    kind: Kind,
}

impl SamplingKey {
    /// The request field this key gives the default of.
    pub fn field(&self) -> Option<&'static fields::Field> {
        fields::by_gguf_key(self.key)
    }
}

const fn k(key: &'static str, flag: &'static str, kind: Kind) -> SamplingKey {
    SamplingKey { key, flag, kind }
}

/// The keys, in the order common.cpp reads them.
pub const SAMPLING_KEYS: [SamplingKey; 12] = [
    k("general.sampling.sequence", "--samplers", Kind::Sequence),
    k("general.sampling.top_k", "--top-k", Kind::Int),
    k("general.sampling.top_p", "--top-p", Kind::Float),
    k("general.sampling.min_p", "--min-p", Kind::Float),
    k(
        "general.sampling.xtc_probability",
        "--xtc-probability",
        Kind::Float,
    ),
    k(
        "general.sampling.xtc_threshold",
        "--xtc-threshold",
        Kind::Float,
    ),
    k("general.sampling.temp", "--temp", Kind::Float),
    k(
        "general.sampling.penalty_last_n",
        "--repeat-last-n",
        Kind::Int,
    ),
    k(
        "general.sampling.penalty_repeat",
        "--repeat-penalty",
        Kind::Float,
    ),
    k("general.sampling.mirostat", "--mirostat", Kind::Int),
    k(
        "general.sampling.mirostat_tau",
        "--mirostat-ent",
        Kind::Float,
    ),
    k(
        "general.sampling.mirostat_eta",
        "--mirostat-lr",
        Kind::Float,
    ),
];

/// One default the model's GGUF gives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelDefault {
    /// `general.sampling.top_k`.
    pub key: &'static str,
    /// The request field it sets (`top_k`; `temp` is `temperature`, `penalty_repeat` is
    /// `repeat_penalty`, `sequence` is `samplers`).
    pub field: &'static str,
    /// The value as llama.cpp reads it (its text of the GGUF value, cut to its buffer).
    pub gguf: String,
    /// The value applied, as a request field.
    pub value: Value,
}

/// A model's sampling defaults, and what was wrong with the keys that could not be used.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ModelSamplingDefaults {
    pub defaults: Vec<ModelDefault>,
    /// One line per key ignored or changed (wrong type, out of gauge's range, unknown sampler).
    pub warnings: Vec<String>,
}

/// What became of one model default in one request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DefaultUse {
    #[serde(flatten)]
    pub default: ModelDefault,
    /// Whether the request runs with it.
    pub applied: bool,
    /// Who set the field instead, when not applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
}

/// `isspace` in the C locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `snprintf(buf, size, "%s", value)` leaves in llama.cpp's buffer: the text up to its first
/// NUL, cut to `size - 1` bytes.
fn c_buffer(value: &str, size: usize) -> &[u8] {
    let b = value.as_bytes();
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    &b[..b.len().min(size - 1)]
}

/// `strtol(s, &end, 10)` as llama.cpp uses it: `None` when no digits were read (`end == s`);
/// out-of-range values saturate at `LONG_MIN`/`LONG_MAX` (64-bit `long`).
pub fn c_strtol(s: &[u8]) -> Option<i64> {
    let mut i = s.iter().take_while(|&&b| c_space(b)).count();
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits: Vec<u8> = s[i..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    if digits.is_empty() {
        return None;
    }
    let mut v: i128 = 0;
    for d in digits {
        v = (v * 10 + i128::from(d - b'0')).min(i128::from(u64::MAX) + 1);
    }
    let v = if neg { -v } else { v };
    Some(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// `strtof(s, &end)`: the longest prefix that is a decimal float (`[ws][sign]digits[.digits]
/// [e[sign]digits]`), `inf`, `infinity` or `nan` (any case); `None` when there is none. Rust's
/// parser rounds correctly, as glibc's does. (C's hexadecimal floats, `0x1p3`, which a
/// string-typed key could hold, read here as the `0` before the `x`.)
pub fn c_strtof(s: &[u8]) -> Option<f32> {
    let start = s.iter().take_while(|&&b| c_space(b)).count();
    let s = &s[start..];
    let mut i = 0;
    if matches!(s.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let rest = &s[i..];
    let lower: Vec<u8> = rest.iter().take(8).map(u8::to_ascii_lowercase).collect();
    let special = if lower.starts_with(b"infinity") {
        Some(8)
    } else if lower.starts_with(b"inf") || lower.starts_with(b"nan") {
        Some(3)
    } else {
        None
    };
    let end = if let Some(n) = special {
        i + n
    } else {
        let int = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut j = int;
        let mut frac = 0;
        if rest.get(j) == Some(&b'.') {
            frac = rest[j + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            j += 1 + frac;
        }
        if int + frac == 0 {
            return None;
        }
        if matches!(rest.get(j), Some(b'e' | b'E')) {
            let mut e = j + 1;
            if matches!(rest.get(e), Some(b'+' | b'-')) {
                e += 1;
            }
            let exp = rest[e.min(rest.len())..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if exp > 0 {
                j = e + exp;
            }
        }
        i + j
    };
    let text = std::str::from_utf8(&s[..end]).ok()?;
    // Rust spells a trailing-dot float ("5.") and a leading one (".5") as C does; `nan` with a
    // sign parses too.
    text.parse::<f32>().ok()
}

/// `common_sampler_types_from_names` over the `;`-split sequence: each name case-insensitive with
/// llama.cpp's aliases; unknown names (and `infill`, which gauge lacks) dropped, each reported.
fn parse_sequence(text: &str, warnings: &mut Vec<String>, key: &str) -> Vec<SamplerType> {
    let mut out = Vec::new();
    for name in text.split(';') {
        match SamplerType::from_name(name) {
            Ok(SamplerType::Infill) => warnings.push(format!(
                "{key}: dropped sampler \"infill\" (gauge has no infill stage)"
            )),
            Ok(t) => out.push(t),
            Err(_) => warnings.push(format!(
                "{key}: dropped unknown sampler name {:?} (as llama.cpp does)",
                name.to_ascii_lowercase()
            )),
        }
    }
    out
}

/// A default's value as text: a float as the f32 it is (`0.3`, not `0.30000001192092896`), a
/// sequence as `--samplers` writes it.
fn shown(v: &Value) -> String {
    match v {
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(";"),
        Value::Number(n) if n.is_f64() => (n.as_f64().unwrap_or(f64::NAN) as f32).to_string(),
        v => v.to_string(),
    }
}

impl ModelSamplingDefaults {
    /// Read the keys through `meta`, which returns llama.cpp's text of a key
    /// (`llama_model_meta_val_str`) or `None` when the model lacks it (or it is an array).
    pub fn from_meta(meta: impl Fn(&str) -> Option<String>) -> ModelSamplingDefaults {
        let mut out = ModelSamplingDefaults::default();
        for sk in SAMPLING_KEYS {
            // Every key has its row (a unit test holds the two lists together).
            let Some(field) = sk.field().map(|f| f.name) else {
                continue;
            };
            let Some(full) = meta(sk.key) else { continue };
            let buf = c_buffer(&full, sk.kind.buf_size());
            // llama.cpp skips a value whose text is empty (`snprintf` returned 0).
            if buf.is_empty() {
                continue;
            }
            let gguf = String::from_utf8_lossy(buf).into_owned();
            let value = match sk.kind {
                Kind::Int => match c_strtol(buf) {
                    Some(v) => Value::from(v as i32),
                    None => {
                        out.warnings.push(format!(
                            "{} = {gguf:?} is not an integer: ignored (as llama.cpp does)",
                            sk.key
                        ));
                        continue;
                    }
                },
                Kind::Float => match c_strtof(buf) {
                    Some(x) if !x.is_finite() => {
                        out.warnings.push(format!(
                            "{} = {gguf:?} is not a finite number: ignored",
                            sk.key
                        ));
                        continue;
                    }
                    Some(x) if field == "temperature" && x < 0.0 => {
                        out.warnings.push(format!(
                            "{} = {gguf:?} is read as 0 (greedy): llama.cpp samples greedily \
                             at any temperature <= 0",
                            sk.key
                        ));
                        Value::from(0.0f32)
                    }
                    Some(x) => Value::from(x),
                    None => {
                        out.warnings.push(format!(
                            "{} = {gguf:?} is not a number: ignored (as llama.cpp does)",
                            sk.key
                        ));
                        continue;
                    }
                },
                Kind::Sequence => {
                    let names = parse_sequence(&gguf, &mut out.warnings, sk.key);
                    Value::Array(
                        names
                            .into_iter()
                            .map(|t| Value::from(t.canonical_name()))
                            .collect(),
                    )
                }
            };
            // gauge's own range check, so a model's value never fails every request.
            let one = Value::Object(Map::from_iter([(field.to_string(), value.clone())]));
            if let Err(e) = SamplingParams::from_value(&one).and_then(|p| p.validate(usize::MAX)) {
                out.warnings
                    .push(format!("{} = {gguf:?} is ignored: {e}", sk.key));
                continue;
            }
            out.defaults.push(ModelDefault {
                key: sk.key,
                field,
                gguf,
                value,
            });
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.defaults.is_empty()
    }

    /// The default for a request field, if the model gives one.
    pub fn get(&self, field: &str) -> Option<&ModelDefault> {
        self.defaults.iter().find(|d| d.field == field)
    }

    /// Why `user` keeps the model's default for `d` out, if it does.
    fn overridden(d: &ModelDefault, user: &Map<String, Value>) -> bool {
        if fields::is_set(user, d.field) {
            return true;
        }
        // The model's θ is a ctrl θ: applied in normalized mode it would be another penalty.
        d.field == "repeat_penalty"
            && user.get("repeat_penalty_mode") == Some(&Value::from("normalized"))
    }

    /// The request `user` (every layer above the model: command line or server flags, then the
    /// request) over the model's defaults, and what became of each default. `set_by` names who
    /// set a field the model's default does not apply to ("the request", "the command line").
    pub fn apply(
        &self,
        user: &Map<String, Value>,
        set_by: &str,
    ) -> (Map<String, Value>, Vec<DefaultUse>) {
        let mut base = Map::new();
        let mut uses = Vec::with_capacity(self.defaults.len());
        for d in &self.defaults {
            let over = Self::overridden(d, user);
            if !over {
                base.insert(d.field.to_string(), d.value.clone());
            }
            uses.push(DefaultUse {
                default: d.clone(),
                applied: !over,
                set_by: over.then(|| {
                    if d.field == "repeat_penalty" && !fields::is_set(user, d.field) {
                        format!("{set_by} (repeat_penalty_mode \"normalized\": the model's θ is a ctrl θ)")
                    } else {
                        set_by.to_string()
                    }
                }),
            });
        }
        (fields::overlay(&base, user), uses)
    }

    /// The note for a model whose GGUF sets `penalty_repeat`: it is a ctrl θ, and `gauge
    /// calibrate` finds the normalized θ′ with the same effect on this model.
    pub fn penalty_note(&self, model: &str) -> Option<String> {
        let d = self.get("repeat_penalty")?;
        Some(format!(
            "{} = {} is a ctrl θ (llama.cpp's sign-branched multiplicative repeat penalty on raw \
             logits, repeat_penalty_mode \"ctrl\"); for the normalized θ′ with the same effect on \
             this model run `gauge calibrate --model {model} --theta {}`",
            d.key,
            d.gguf,
            shown(&d.value)
        ))
    }

    /// Text lines for a chain print: each default with its source and whether it applies, then
    /// the penalty note and the warnings.
    pub fn describe(&self, uses: &[DefaultUse], model: &str) -> Vec<String> {
        let mut lines = Vec::new();
        for u in uses {
            let d = &u.default;
            let shown = shown(&d.value);
            match (&u.applied, &u.set_by) {
                (true, _) => lines.push(format!(
                    "model default: {} = {shown} (from the model's GGUF: {} = {:?})",
                    d.field, d.key, d.gguf
                )),
                (false, by) => lines.push(format!(
                    "model default: {} = {shown} not applied: set by {} (the model's GGUF: {} = {:?})",
                    d.field,
                    by.as_deref().unwrap_or("the user"),
                    d.key,
                    d.gguf
                )),
            }
        }
        lines.extend(self.penalty_note(model).map(|n| format!("note: {n}")));
        lines.extend(self.warnings.iter().map(|w| format!("warning: {w}")));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn defaults(kv: &[(&str, &str)]) -> ModelSamplingDefaults {
        let m: HashMap<String, String> = kv
            .iter()
            .map(|(k, v)| (format!("general.sampling.{k}"), v.to_string()))
            .collect();
        ModelSamplingDefaults::from_meta(|k| m.get(k).cloned())
    }

    /// The keys llama.cpp reads are the table of fields' GGUF keys, each on a field whose JSON
    /// type is the one llama.cpp parses the key's text as.
    #[test]
    fn every_key_is_a_row_of_the_fields_table_and_back() {
        for sk in SAMPLING_KEYS {
            let f = sk
                .field()
                .unwrap_or_else(|| panic!("{} has no row", sk.key));
            let json = match sk.kind {
                Kind::Int => vec![fields::JsonType::Integer],
                Kind::Float => vec![fields::JsonType::Number],
                Kind::Sequence => vec![fields::JsonType::Array, fields::JsonType::String],
            };
            assert_eq!(f.takes.json, json, "{}", sk.key);
        }
        for f in fields::SAMPLING.iter().filter(|f| f.gguf.is_some()) {
            assert!(
                SAMPLING_KEYS.iter().any(|sk| Some(sk.key) == f.gguf),
                "{} has a GGUF key llama.cpp does not read",
                f.name
            );
        }
    }

    #[test]
    fn strtol_reads_leading_digits_like_c() {
        assert_eq!(c_strtol(b"7"), Some(7));
        assert_eq!(c_strtol(b"  -12abc"), Some(-12));
        assert_eq!(c_strtol(b"7.500000"), Some(7));
        assert_eq!(c_strtol(b"+3"), Some(3));
        assert_eq!(c_strtol(b"true"), None);
        assert_eq!(c_strtol(b"-"), None);
        assert_eq!(c_strtol(b"99999999999999999999999"), Some(i64::MAX));
        assert_eq!(c_strtol(b"-99999999999999999999999"), Some(i64::MIN));
    }

    #[test]
    fn strtof_reads_the_longest_float_prefix_like_c() {
        assert_eq!(c_strtof(b"0.300000"), Some(0.3));
        assert_eq!(c_strtof(b" 1e-2x"), Some(0.01));
        assert_eq!(c_strtof(b"5."), Some(5.0));
        assert_eq!(c_strtof(b".5"), Some(0.5));
        assert_eq!(c_strtof(b"2e"), Some(2.0));
        assert_eq!(c_strtof(b"-INF"), Some(f32::NEG_INFINITY));
        assert!(c_strtof(b"nan").unwrap().is_nan());
        assert_eq!(c_strtof(b"1e99"), Some(f32::INFINITY));
        assert_eq!(c_strtof(b"false"), None);
        assert_eq!(c_strtof(b"."), None);
        assert_eq!(c_strtof(b"abc"), None);
    }

    #[test]
    fn values_are_read_as_llama_cpp_reads_their_text() {
        // Texts as llama.cpp's gguf_kv_to_str writes them: an int, a float (%f), a float for an
        // integer key, a string, a bool.
        let d = defaults(&[
            ("top_k", "7"),
            ("temp", "0.300000"),
            ("penalty_last_n", "32.900000"),
            ("top_p", "0.5"),
            ("mirostat", "true"),
        ]);
        assert_eq!(d.get("top_k").unwrap().value, json!(7));
        assert_eq!(d.get("temperature").unwrap().value, json!(0.3f32));
        assert_eq!(d.get("repeat_last_n").unwrap().value, json!(32));
        assert_eq!(d.get("top_p").unwrap().value, json!(0.5f32));
        assert!(d.get("mirostat").is_none());
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(d.warnings[0].contains("general.sampling.mirostat"));
    }

    #[test]
    fn values_outside_gauges_ranges_are_ignored_with_a_warning() {
        let d = defaults(&[
            ("top_p", "1.500000"),
            ("mirostat", "3"),
            ("penalty_repeat", "0.000000"),
            ("temp", "-1.000000"),
            ("min_p", "inf"),
        ]);
        assert!(d.get("top_p").is_none() && d.get("mirostat").is_none());
        assert!(d.get("repeat_penalty").is_none() && d.get("min_p").is_none());
        assert_eq!(d.get("temperature").unwrap().value, json!(0.0));
        assert_eq!(d.warnings.len(), 5, "{:?}", d.warnings);
        assert!(d
            .warnings
            .iter()
            .any(|w| w.contains("top_p") && w.contains("[0, 1]")));
    }

    #[test]
    fn the_sequence_takes_llama_cpp_names_and_drops_unknown_ones() {
        let d = defaults(&[("sequence", "Top-K;bogus;;temp;infill")]);
        assert_eq!(
            d.get("samplers").unwrap().value,
            json!(["top_k", "temperature"])
        );
        assert_eq!(d.warnings.len(), 3, "{:?}", d.warnings);
        // An empty text is skipped, as llama.cpp skips it.
        assert!(defaults(&[("sequence", "")]).is_empty());
    }

    #[test]
    fn values_are_cut_to_llama_cpps_buffers() {
        let long = format!("{}9", "1".repeat(63));
        let d = defaults(&[("top_k", &long)]);
        // 63 bytes survive; strtol saturates, and the cast to int32 wraps as C's does.
        assert_eq!(d.get("top_k").unwrap().gguf.len(), 63);
        assert_eq!(d.get("top_k").unwrap().value, json!(i64::MAX as i32));
    }

    #[test]
    fn user_fields_win_and_the_rest_applies() {
        let d = defaults(&[
            ("top_k", "7"),
            ("temp", "0.300000"),
            ("penalty_repeat", "1.300000"),
        ]);
        let user = json!({"temp": 0.9}).as_object().cloned().unwrap();
        let (req, uses) = d.apply(&user, "the request");
        assert_eq!(
            Value::Object(req),
            json!({"top_k": 7, "temp": 0.9, "repeat_penalty": 1.3f32})
        );
        assert!(uses[0].applied && !uses[1].applied && uses[2].applied);
        assert_eq!(uses[1].set_by.as_deref(), Some("the request"));

        let normalized = json!({"repeat_penalty_mode": "normalized"});
        let (req, uses) = d.apply(normalized.as_object().unwrap(), "the request");
        assert!(!req.contains_key("repeat_penalty"));
        assert!(!uses[2].applied);

        let (req, _) = d.apply(json!({"preset": "chat"}).as_object().unwrap(), "x");
        assert_eq!(Value::Object(req), json!({"preset": "chat"}));
        let note = d.penalty_note("m.gguf").unwrap();
        assert!(
            note.contains("ctrl θ") && note.contains("gauge calibrate --model m.gguf --theta 1.3")
        );
    }
}
