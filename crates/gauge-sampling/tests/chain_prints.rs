//! Every entry of `data/chain_prints.json` (llama.cpp's `common_sampler_init` + chain print +
//! `params.print()`): gauge must build the same chain and print the same parameters.
//!
//! Each entry's label says which settings llama.cpp was given; `request_for` maps it to the request
//! JSON gauge is given. Two deliberate deviations are asserted explicitly: a window of `-1` means
//! "the whole history" in gauge, so the stage llama.cpp prints as a `?` placeholder is live; and
//! unknown sampler names or letters are errors in gauge (llama.cpp drops them).

mod common;

use gauge_sampling::order;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::{Chain, SamplingError};
use serde_json::{json, Value};

/// What the test expects of gauge for one entry, besides "same chain, same params print".
enum Deviation {
    None,
    /// `repeat_last_n = -1` / `dry_penalty_last_n = -1`: gauge prints this stage without the `?`.
    WindowMinusOneIsLive(&'static str),
}

/// The request describing an entry's settings, and whether gauge deliberately differs.
fn request_for(settings: &str) -> (Value, Deviation) {
    // DRY without a vocabulary needs its breakers as token ids; the chain print does not show them.
    let dry_ids = json!([[13], [25], [1], [29]]);
    match settings {
        "defaults" => (json!({}), Deviation::None),
        s if s.starts_with("all enabled (repeat 1.1, freq 0.1, presence 0.1, dry 0.8, top_n_sigma 2, typ_p 0.95, xtc_prob 0.5, dynatemp 0.5, 1 logit bias)") => (
            json!({
                "repeat_penalty": 1.1, "frequency_penalty": 0.1, "presence_penalty": 0.1,
                "dry_multiplier": 0.8, "dry_sequence_breaker_ids": dry_ids,
                "top_n_sigma": 2, "typical_p": 0.95, "xtc_probability": 0.5, "dynatemp_range": 0.5,
                "logit_bias": [[15043, 1.0]]
            }),
            Deviation::None,
        ),
        "temp 0" => (json!({"temperature": 0}), Deviation::None),
        "temp 1.0 (placeholder ?temp-ext)" => (json!({"temperature": 1.0}), Deviation::None),
        "temp 1.0 + dynatemp_range 0.3" => (json!({"temperature": 1.0, "dynatemp_range": 0.3}), Deviation::None),
        "top_k 0, top_p 1, min_p 0" => (json!({"top_k": 0, "top_p": 1, "min_p": 0}), Deviation::None),
        "mirostat 1 (penalty_repeat 1.1 is dropped)" => (json!({"mirostat": 1, "repeat_penalty": 1.1}), Deviation::None),
        "mirostat 2" => (json!({"mirostat": 2}), Deviation::None),
        "mirostat 2, temp 1.0" => (json!({"mirostat": 2, "temp": 1.0}), Deviation::None),
        s if s.starts_with("samplers [min_p, adaptive_p, temperature]") => (
            json!({"samplers": ["min_p", "adaptive_p", "temperature"], "adaptive_target": 0.5}),
            Deviation::None,
        ),
        s if s.starts_with("--sampler-seq 'kx?tZp'") => {
            // gauge rejects the unknown letters instead of dropping them ...
            assert_eq!(order::parse_letters("kx?tZp").unwrap_err(), SamplingError::UnknownSamplerLetter('?'));
            let bad = SamplingParams::from_value(&json!({"samplers": "kx?tZp"})).unwrap_err();
            assert_eq!(bad, SamplingError::UnknownSamplerLetter('?'));
            // ... and builds llama.cpp's chain from the letters llama.cpp kept.
            (json!({"samplers": "kxtp"}), Deviation::None)
        }
        s if s.starts_with("--samplers 'Top-K;nucleus;TEMP;typ;minp;bogus'") => {
            let names: Vec<String> = "Top-K;nucleus;TEMP;typ;minp;bogus".split(';').map(String::from).collect();
            assert_eq!(order::parse_names(&names).unwrap_err(), SamplingError::UnknownSampler("bogus".into()));
            (json!({"samplers": ["Top-K", "nucleus", "TEMP", "typ", "minp"]}), Deviation::None)
        }
        s if s.starts_with("penalty_last_n -1, repeat 1.05") => (
            json!({"repeat_last_n": -1, "repeat_penalty": 1.05}),
            Deviation::WindowMinusOneIsLive("penalties"),
        ),
        "dry_multiplier 0.8, dry_penalty_last_n -1" => (
            json!({"dry_multiplier": 0.8, "dry_penalty_last_n": -1, "dry_sequence_breaker_ids": dry_ids}),
            Deviation::WindowMinusOneIsLive("dry"),
        ),
        other => panic!("chain_prints.json has an entry this test does not map: {other:?}"),
    }
}

/// `"ggml-vocab-x.gguf (n_vocab 32000, suppress_tokens 0): settings"` → (32000, "settings").
fn parse_label(label: &str) -> (usize, &str) {
    let n = label
        .split("(n_vocab ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("label has n_vocab");
    let settings = label.split_once("): ").expect("label has settings").1;
    (n.parse().expect("n_vocab is a number"), settings)
}

#[test]
fn every_chain_print_entry_matches_llama_cpp() {
    let data = common::load_json("chain_prints.json");
    let entries = data["entries"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        17,
        "chain_prints.json changed: review the mapping"
    );
    for e in entries {
        let label = e["label"].as_str().unwrap();
        let (n_vocab, settings) = parse_label(label);
        assert!(
            label.contains("suppress_tokens 0"),
            "{label}: suppress tokens are not modelled"
        );
        let (req, deviation) = request_for(settings);
        let params =
            SamplingParams::from_value(&req).unwrap_or_else(|err| panic!("{label}: {err}"));
        let chain = Chain::from_params(&params, n_vocab, None)
            .unwrap_or_else(|err| panic!("{label}: {err}"));

        let llama_chain = e["chain"].as_str().unwrap();
        let want_chain = match deviation {
            Deviation::None => llama_chain.to_string(),
            Deviation::WindowMinusOneIsLive(stage) => {
                let placeholder = format!("-> ?{stage} ");
                assert!(
                    llama_chain.contains(&placeholder),
                    "{label}: llama.cpp was expected to print ?{stage}"
                );
                llama_chain.replace(&placeholder, &format!("-> {stage} "))
            }
        };
        assert_eq!(chain.describe(), want_chain, "chain of {label}");
        assert_eq!(
            format!("sampler chain: {}", chain.describe()),
            e["log_line"]
                .as_str()
                .unwrap()
                .replace(llama_chain, &want_chain)
        );
        assert_eq!(
            params.print_params(),
            e["params_print"].as_str().unwrap(),
            "params print of {label}"
        );
    }
}

#[test]
fn window_minus_one_is_not_silently_disabled() {
    // llama-tts's settings: llama.cpp clamps -1 to 0 and the penalty disappears (?penalties).
    let p =
        SamplingParams::from_value(&json!({"repeat_last_n": -1, "repeat_penalty": 1.05})).unwrap();
    let chain = Chain::from_params(&p, 32000, None).unwrap();
    assert_eq!(chain.stages()[0].name(), "penalties");
}
