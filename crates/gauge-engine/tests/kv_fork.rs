//! Forked sequences: the child continues from the parent's KV cache exactly as if it had decoded
//! the whole history itself, the parent is not disturbed, and the prefix is computed once.

mod common;

use std::sync::Arc;

use gauge_engine::{LlamaSource, LogitSource, Model, SeqId};

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Decode `tokens` one step per token on `seq`.
fn feed_one_by_one(src: &mut LlamaSource, seq: SeqId, tokens: &[i32]) {
    for &t in tokens {
        src.push(seq, &[t]).unwrap();
        src.step().unwrap();
    }
}

fn prompt_and_continuation(model: &Arc<Model>) -> (Vec<i32>, Vec<i32>) {
    let prompt = model
        .tokenize_prompt("The quick brown fox jumps over the lazy dog. Then the fox")
        .unwrap();
    let cont = model
        .tokenize(" ran into the forest and hid behind a tree", false, false)
        .unwrap();
    assert!(prompt.len() > 8 && cont.len() > 5);
    (prompt, cont)
}

#[test]
fn forked_sequence_gives_the_same_logits_as_decoding_the_full_history_fresh() {
    let model = common::model();
    let src = LlamaSource::new(model.clone()).unwrap();
    fork_equals_fresh(&model, src);
}

#[test]
fn forked_sequence_matches_fresh_decode_with_a_unified_kv_cache() {
    // Unified cache: the fork tags the parent's cells instead of copying a stream.
    let model = common::model();
    let opts = gauge_engine::ModelOptions {
        kv_unified: true,
        ..model.options().clone()
    };
    let src = LlamaSource::with_options(model.clone(), &opts).unwrap();
    fork_equals_fresh(&model, src);
}

fn fork_equals_fresh(model: &Arc<Model>, mut src: LlamaSource) {
    let (prompt, cont) = prompt_and_continuation(model);

    // Parent decodes the prompt; the child forks it and decodes the continuation.
    let parent = src.new_sequence().unwrap();
    src.push(parent, &prompt).unwrap();
    src.step().unwrap();
    let parent_row = src.logits(parent).unwrap().to_vec();
    let before_fork = src.forward_tokens();
    let child = src.fork(parent).unwrap();
    assert_eq!(
        src.forward_tokens(),
        before_fork,
        "a fork evaluates nothing"
    );
    assert_eq!(
        src.logits(child).unwrap(),
        &parent_row[..],
        "the child inherits the parent's row"
    );
    feed_one_by_one(&mut src, child, &cont);
    let forked = src.logits(child).unwrap().to_vec();
    assert_eq!(src.forward_tokens(), (prompt.len() + cont.len()) as u64);

    // A fresh sequence decoding the same history in the same chunks: bit-identical.
    let fresh = src.new_sequence().unwrap();
    src.push(fresh, &prompt).unwrap();
    src.step().unwrap();
    feed_one_by_one(&mut src, fresh, &cont);
    let same_chunks = src.logits(fresh).unwrap().to_vec();
    assert_eq!(
        forked, same_chunks,
        "fork == fresh decode with the same chunking, bit for bit"
    );
    src.free(fresh).unwrap();

    // A fresh sequence decoding the whole history in one prefill: same up to the batch-shape
    // rounding of the matrix kernels, same argmax.
    let whole = src.new_sequence().unwrap();
    let mut history = prompt.clone();
    history.extend_from_slice(&cont);
    src.push(whole, &history).unwrap();
    src.step().unwrap();
    let one_prefill = src.logits(whole).unwrap().to_vec();
    let d = max_abs_diff(&forked, &one_prefill);
    eprintln!("max |fork - single prefill| = {d:e}");
    assert!(d < 0.05, "fork and a single-prefill decode differ by {d}");
    assert_eq!(argmax(&forked), argmax(&one_prefill));

    // The parent was not disturbed: its row is unchanged, and continuing it matches the child.
    assert_eq!(src.logits(parent).unwrap(), &parent_row[..]);
    feed_one_by_one(&mut src, parent, &cont);
    assert_eq!(
        src.logits(parent).unwrap(),
        &forked[..],
        "parent continued == child"
    );
}

#[test]
fn sequences_decoded_in_one_batch_match_sequences_decoded_alone() {
    let model = common::model();
    let (prompt, cont) = prompt_and_continuation(&model);
    let other = model.tokenize_prompt("In 1492, Columbus sailed").unwrap();

    // Alone.
    let mut alone = LlamaSource::new(model.clone()).unwrap();
    let a = alone.new_sequence().unwrap();
    alone.push(a, &prompt).unwrap();
    alone.step().unwrap();
    feed_one_by_one(&mut alone, a, &cont);
    let alone_row = alone.logits(a).unwrap().to_vec();

    // Together with an unrelated sequence and a fork, one step per token for all of them.
    let mut src = LlamaSource::new(model.clone()).unwrap();
    let a = src.new_sequence().unwrap();
    let b = src.new_sequence().unwrap();
    src.push(a, &prompt).unwrap();
    src.push(b, &other).unwrap();
    src.step().unwrap();
    let calls = src.decode_calls();
    let c = src.fork(a).unwrap();
    for &t in &cont {
        src.push(a, &[t]).unwrap();
        src.push(b, &[t]).unwrap();
        src.push(c, &[t]).unwrap();
        src.step().unwrap();
    }
    assert_eq!(
        src.decode_calls() - calls,
        cont.len() as u64,
        "one llama_decode per step for all sequences"
    );
    let together = src.logits(a).unwrap().to_vec();
    let forked = src.logits(c).unwrap().to_vec();
    let d = max_abs_diff(&alone_row, &together);
    eprintln!("max |alone - batched| = {d:e}");
    assert!(d < 0.05, "batched decode differs from a lone decode by {d}");
    assert_eq!(argmax(&alone_row), argmax(&together));
    assert_eq!(
        together, forked,
        "two sequences with the same history in one batch agree exactly"
    );
}

#[test]
fn prefill_longer_than_n_batch_is_chunked() {
    let model = common::model();
    let opts = gauge_engine::ModelOptions {
        n_ctx: 512,
        n_seq_max: 2,
        n_batch: 16,
        ..Default::default()
    };
    let text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty";
    let prompt = model.tokenize_prompt(text).unwrap();
    assert!(prompt.len() > 16);

    let mut chunked = LlamaSource::with_options(model.clone(), &opts).unwrap();
    let s = chunked.new_sequence().unwrap();
    chunked.push(s, &prompt).unwrap();
    chunked.step().unwrap();
    assert_eq!(chunked.decode_calls(), prompt.len().div_ceil(16) as u64);
    assert_eq!(chunked.seq_len(s).unwrap(), prompt.len());

    let mut whole = LlamaSource::new(model.clone()).unwrap();
    let w = whole.new_sequence().unwrap();
    whole.push(w, &prompt).unwrap();
    whole.step().unwrap();
    let d = max_abs_diff(chunked.logits(s).unwrap(), whole.logits(w).unwrap());
    assert!(d < 0.05, "chunked prefill differs by {d}");
    assert_eq!(
        argmax(chunked.logits(s).unwrap()),
        argmax(whole.logits(w).unwrap())
    );
}
