//! A constraint that compiles but cannot be completed: the output reaches a dead end, only the
//! end-of-generation token is allowed, and the state's [`DeadEnd`] flag says why, so that a
//! server never reports such an end as a normal stop (issue 21).

use gauge_grammar::{ConstraintRequest, ConstraintSpec, GrammarState, GrammarVocab};
use serde_json::json;

const EOS: u32 = 256;

fn byte_vocab() -> GrammarVocab {
    let mut words: Vec<Vec<u8>> = (0..256u32).map(|b| vec![b as u8]).collect();
    words.push(b"\xFF<eos>".to_vec());
    GrammarVocab::from_token_bytes(&words, &[EOS]).expect("byte vocabulary")
}

/// Feed `text` byte by byte while allowed; return how many bytes went in.
fn feed(st: &mut GrammarState, text: &str) -> usize {
    for (i, &b) in text.as_bytes().iter().enumerate() {
        if !st.is_allowed(b as u32) {
            return i;
        }
        st.consume(b as u32).expect("allowed");
    }
    text.len()
}

#[test]
fn an_unsatisfiable_branch_reached_at_run_time_is_a_dead_end() {
    let schema = json!({
        "anyOf": [
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"],
             "additionalProperties": false},
            {"type": "integer"}
        ],
        "$defs": {"n": {"$ref": "#/$defs/n"}}
    });
    let req = ConstraintRequest::new(ConstraintSpec::JsonSchema(schema), "json_schema");
    let mut st = GrammarState::compile(&req, &byte_vocab()).expect("compiles");
    let dead = st.dead_end();
    assert_eq!(dead.get(), None);
    // `{"a":` is allowed (the branch is not known to be empty until its value), then nothing.
    assert_eq!(feed(&mut st, r#"{"a":1"#), 5);
    assert!(st.is_allowed(EOS), "only the end is left");
    let why = dead.get().expect("a dead end, flagged");
    assert!(why.contains("cannot be satisfied"), "{why}");
}

#[test]
fn an_output_that_may_end_is_not_a_dead_end() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let req = ConstraintRequest::new(ConstraintSpec::JsonSchema(schema), "json_schema");
    let mut st = GrammarState::compile(&req, &byte_vocab()).expect("compiles");
    let dead = st.dead_end();
    assert_eq!(feed(&mut st, r#"{"a": 12}"#), 9);
    assert!(st.is_allowed(EOS));
    assert_eq!(dead.get(), None);
    st.consume(EOS).unwrap();
    assert!(st.is_stopped());
    let _ = st.allowed();
    assert_eq!(dead.get(), None, "after the end, nothing is a dead end");
}
