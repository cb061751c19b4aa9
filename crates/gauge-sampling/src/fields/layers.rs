//! Layers of defaults.
//!
//! A request is the top of a stack: llama.cpp's built-in defaults (in `SamplingParams::default`),
//! then a model's GGUF defaults (`general.sampling.*`, [`super::Field::gguf`]), then a server's or
//! a command line's settings, then the request's own fields. llama.cpp applies a lower layer's
//! value only where no higher layer set that field (common.cpp's `user_sampling_config` bit per
//! field); these two functions are that rule over request objects, with every name of a setting
//! counted as it: its aliases, and the fields read with it (a request's `logprobs: true` must
//! replace a default `n_probs`).

use super::{canonical, field};
use serde_json::{Map, Value};

/// Whether `a` and `b` name the same setting.
fn same_setting(a: &str, b: &str) -> bool {
    a == b || matches!((field(a), field(b)), (Some(fa), Some(fb)) if fa.setting() == fb.setting())
}

fn present<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// Whether the layer `obj` sets the setting `field` (any of its names, with a non-null value; a
/// JSON `null` counts as absent). A `preset` sets every setting (its values are the base the rest
/// of the request overrides); HF's `do_sample: false` sets the temperature (to 0); HF's and
/// vLLM's `repetition_penalty` sets the penalty window too (to the whole history, their scope).
pub fn is_set(obj: &Map<String, Value>, field: &str) -> bool {
    if present(obj, "preset").is_some() {
        return true;
    }
    if obj
        .iter()
        .any(|(k, v)| !v.is_null() && same_setting(k, field))
    {
        return true;
    }
    match canonical(field) {
        "temperature" => present(obj, "do_sample") == Some(&Value::Bool(false)),
        "repeat_last_n" => present(obj, "repetition_penalty").is_some(),
        _ => false,
    }
}

/// `top` layered over `base`: `base`'s value of each setting `top` does not set ([`is_set`]),
/// and everything `top` sets. `null`s in `top` are dropped (absent, so `base` shows through).
pub fn overlay(base: &Map<String, Value>, top: &Map<String, Value>) -> Map<String, Value> {
    let mut out: Map<String, Value> = base
        .iter()
        .filter(|(k, _)| !is_set(top, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in top {
        if !v.is_null() {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod layer_tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn a_setting_is_set_under_any_of_its_names() {
        let user = obj(json!({"temp": 0.5, "max_tokens": 3, "logprobs": true, "x": null}));
        assert!(is_set(&user, "temperature"));
        assert!(is_set(&user, "n_predict"));
        assert!(is_set(&user, "n_probs"));
        assert!(!is_set(&user, "top_k"));
        assert!(!is_set(&user, "x"), "null is absent");
        assert!(is_set(&obj(json!({"preset": "json"})), "top_k"));
        assert!(is_set(&obj(json!({"do_sample": false})), "temperature"));
        assert!(!is_set(&obj(json!({"do_sample": true})), "temperature"));
        assert!(is_set(
            &obj(json!({"repetition_penalty": 1.2})),
            "repeat_last_n"
        ));
    }

    #[test]
    fn overlay_keeps_the_base_only_where_the_top_is_silent() {
        let base = obj(json!({"top_k": 7, "temperature": 0.3, "repeat_last_n": 32, "n_probs": 2}));
        let top =
            obj(json!({"temp": 0.9, "repetition_penalty": 1.1, "logprobs": true, "top_k": null}));
        let out = overlay(&base, &top);
        assert_eq!(
            Value::Object(out),
            json!({"top_k": 7, "temp": 0.9, "repetition_penalty": 1.1, "logprobs": true})
        );
        let preset = overlay(&base, &obj(json!({"preset": "code"})));
        assert_eq!(Value::Object(preset), json!({"preset": "code"}));
    }
}
