//! End-to-end generation on the real default model.

mod common;

use gauge_engine::{GenerateRequest, Generator, StopReason};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;

#[test]
fn greedy_generation_names_paris_as_the_capital_of_france() {
    let model = common::model();
    let params = SamplingParams {
        temperature: 0.0,
        seed: 42,
        ..Default::default()
    };
    let mut chain = Chain::from_params(&params, model.n_vocab(), Some(&*model)).unwrap();
    let mut gen = Generator::new(model.clone()).unwrap();
    let req = GenerateRequest {
        prompt: "The capital of France is".into(),
        max_tokens: Some(8),
        ..Default::default()
    };
    let mut streamed = String::new();
    let out = gen
        .generate(&req, &mut chain, &mut |piece| {
            streamed.push_str(piece);
            true
        })
        .unwrap();
    eprintln!(
        "generated {:?} ({:?}) timings {:?}",
        out.text, out.tokens, out.timings
    );
    assert!(
        out.text.contains("Paris"),
        "expected Paris in {:?}",
        out.text
    );
    assert_eq!(streamed, out.text, "the streamed pieces are the text");
    assert!(out.tokens.len() <= 8);
    if out.tokens.len() == 8 {
        assert_eq!(out.stop, StopReason::MaxTokens);
    }
    // The text is the detokenization of the tokens.
    assert_eq!(model.detokenize(&out.tokens).unwrap(), out.text);
}
