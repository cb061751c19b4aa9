//! candle behind the `LogitSource` seam (feature `candle`), on the default model:
//! - the float32 copy candle writes loads in llama.cpp too, and the two engines' next-token rows
//!   agree within `LOGIT_TOLERANCE` (the run-time check of `gauge probe --engine candle`);
//! - sequences, forks and errors of `CandleSource`;
//! - the `candle_fix` example: gauge's `ctrl` chain picks candle's `apply_repeat_penalty` tokens,
//!   gauge's `normalized` chain is unmoved by a ±5 shift while candle's penalty is moved.

#[path = "../examples/candle_fix.rs"]
#[allow(dead_code)]
mod candle_fix;
mod common;

use std::sync::{Arc, OnceLock};

use gauge_engine::candle::{self, CandleOptions, CandleSource, CandleWeights};
use gauge_engine::{LlamaSource, LogitSource, Model, ModelOptions, Registry, SourceError};

/// The float32 copy of the default model (written by candle on first use).
fn f32_path() -> std::path::PathBuf {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let reg = Registry::from_env().expect("cache dir");
        candle::ensure_f32_gguf(&common::default_model_path(), reg.cache_dir())
            .expect("float32 copy")
    })
    .clone()
}

fn source(max_seqs: usize) -> CandleSource {
    CandleSource::load(
        &f32_path(),
        CandleOptions {
            n_ctx: 256,
            max_seqs,
            weights: CandleWeights::Float32,
        },
    )
    .expect("candle loads the float32 copy")
}

/// llama.cpp on the same float32 file, f32 attention (the reference and the tokenizer).
fn llama_f32() -> Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(|| {
        let opts = ModelOptions {
            n_ctx: 256,
            n_seq_max: 1,
            n_threads: 1,
            f32_attention: true,
            ..Default::default()
        };
        Arc::new(Model::load(f32_path(), opts).expect("llama.cpp loads candle's float32 copy"))
    })
    .clone()
}

fn prompts() -> Vec<Vec<i32>> {
    let m = llama_f32();
    common::PROMPTS
        .iter()
        .map(|p| m.tokenize(p, true, false).unwrap())
        .collect()
}

#[test]
fn float32_copy_is_all_f32_and_candle_matches_llama_cpp_on_it() {
    // Every tensor of the copy is F32 (so candle's QMatMul runs plain f32 matmuls), and a second
    // call finds the copy instead of converting again.
    let path = f32_path();
    let reg = Registry::from_env().unwrap();
    assert_eq!(
        candle::ensure_f32_gguf(&common::default_model_path(), reg.cache_dir()).unwrap(),
        path
    );
    assert_eq!(
        candle::ensure_f32_gguf(&path, reg.cache_dir()).unwrap(),
        path
    );
    let mut c = source(2);
    let mut l = LlamaSource::new(llama_f32()).unwrap();
    let diff = candle::max_abs_row_diff(&mut c, &mut l, &prompts()).unwrap();
    eprintln!("candle vs llama.cpp F32 (f32 attention): max abs logit difference {diff:.3e}");
    assert!(
        diff <= candle::LOGIT_TOLERANCE,
        "candle and llama.cpp differ by {diff} on the same float32 weights"
    );
    // The check can fail: candle's quantized kernels on the original GGUF are another model
    // numerically (q8_1 activations), far outside the float32 tolerance.
    let mut native = CandleSource::load(
        &common::default_model_path(),
        CandleOptions {
            n_ctx: 256,
            max_seqs: 2,
            weights: CandleWeights::Native,
        },
    )
    .unwrap();
    let far = candle::max_abs_row_diff(&mut native, &mut l, &prompts()).unwrap();
    eprintln!("candle native Q4_1 vs llama.cpp F32: max abs logit difference {far:.3e}");
    assert!(far > candle::LOGIT_TOLERANCE, "{far}");
}

#[test]
fn a_fork_continues_exactly_as_a_fresh_sequence_with_the_same_history() {
    let mut src = source(4);
    let p = &prompts()[0];
    let a = src.new_sequence().unwrap();
    src.push(a, p).unwrap();
    src.step().unwrap();
    let b = src.fork(a).unwrap();
    assert_eq!(src.logits(b).unwrap(), src.logits(a).unwrap());
    let forward_before = src.forward_tokens();
    // Diverge: a and b take different tokens; the fork recomputes nothing of the prompt.
    src.push(a, &[p[1]]).unwrap();
    src.push(b, &[p[2]]).unwrap();
    src.step().unwrap();
    assert_eq!(src.forward_tokens() - forward_before, 2);
    let (ra, rb) = (
        src.logits(a).unwrap().to_vec(),
        src.logits(b).unwrap().to_vec(),
    );
    assert_ne!(ra, rb);
    // A fresh sequence evaluated the same way (prompt, then one token) gives b's row bit for bit.
    let f = src.new_sequence().unwrap();
    src.push(f, p).unwrap();
    src.step().unwrap();
    src.push(f, &[p[2]]).unwrap();
    src.step().unwrap();
    assert_eq!(src.logits(f).unwrap(), rb.as_slice());
    // And a's row is unchanged by b's step (the shared cache was not written through).
    let g = src.new_sequence().unwrap();
    src.push(g, p).unwrap();
    src.step().unwrap();
    src.push(g, &[p[1]]).unwrap();
    src.step().unwrap();
    assert_eq!(src.logits(g).unwrap(), ra.as_slice());
    for s in [a, b, f, g] {
        src.free(s).unwrap();
    }
    assert_eq!(src.live(), 0);
}

#[test]
fn bad_input_is_a_typed_error_and_the_source_stays_usable() {
    let mut src = source(2);
    let n_vocab = src.n_vocab();
    let a = src.new_sequence().unwrap();
    assert!(matches!(
        src.push(a, &[n_vocab as i32]),
        Err(SourceError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        src.push(a, &[-1]),
        Err(SourceError::TokenOutOfRange { .. })
    ));
    assert!(matches!(src.logits(a), Err(SourceError::NoLogits(_))));
    assert!(matches!(
        src.push(a, &vec![1; 257]),
        Err(SourceError::ContextOverflow {
            needed: 257,
            n_ctx: 256,
            ..
        })
    ));
    assert!(matches!(
        src.push(99, &[1]),
        Err(SourceError::UnknownSequence(99))
    ));
    let _b = src.new_sequence().unwrap();
    assert!(matches!(
        src.new_sequence(),
        Err(SourceError::TooManySequences { max: 2 })
    ));
    src.push(a, &[1, 2, 3]).unwrap();
    assert!(src.fork(a).is_err(), "fork with queued tokens");
    src.step().unwrap();
    assert_eq!(src.logits(a).unwrap().len(), n_vocab);
    src.free(a).unwrap();
    assert!(matches!(src.free(a), Err(SourceError::UnknownSequence(_))));
    // Options out of range name the option.
    let e = CandleSource::load(
        &f32_path(),
        CandleOptions {
            n_ctx: 5000,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("n_ctx") && e.contains("5000") && e.contains("4096"),
        "{e}"
    );
}

#[test]
fn a_gguf_of_another_architecture_is_refused_by_name() {
    use candle_core::quantized::gguf_file::{self, Value};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemma.gguf");
    let mut f = std::fs::File::create(&path).unwrap();
    let arch = Value::String("gemma3".into());
    gguf_file::write(&mut f, &[("general.architecture", &arch)], &[]).unwrap();
    drop(f);
    let e = candle::ensure_f32_gguf(&path, dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("general.architecture") && e.contains("gemma3") && e.contains("llama"),
        "{e}"
    );
}

#[test]
fn candle_version_constant_is_the_linked_one() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).unwrap();
    for name in ["candle-core", "candle-transformers"] {
        let entry = format!(
            "name = \"{name}\"\nversion = \"{}\"",
            candle::CANDLE_VERSION
        );
        assert!(
            lock.contains(&entry),
            "{name} {} not in Cargo.lock",
            candle::CANDLE_VERSION
        );
    }
}

/// The example's loop on candle's own quantized model (what a candle user runs).
mod fix {
    use super::candle_fix::{generate, load, Decide, REPEAT_LAST_N};
    use super::*;

    const THETA: f32 = 1.3;
    const STEPS: usize = 32;

    fn texts() -> Vec<Vec<u32>> {
        let (_, tok, _) = load(&common::default_model_path()).unwrap();
        common::PROMPTS
            .iter()
            .map(|p| tok.encode(*p, true).unwrap().get_ids().to_vec())
            .collect()
    }

    #[test]
    fn ctrl_chain_is_token_identical_to_candles_penalty_and_normalized_ignores_the_shift() {
        let (model, _, n_vocab) = load(&common::default_model_path()).unwrap();
        let run = |shift: f32, d: &mut Decide, p: &[u32]| {
            generate(&mut model.clone(), p, STEPS, shift, d).unwrap()
        };
        let mut candle_moved = 0;
        let mut penalty_acted = 0;
        for p in texts() {
            let mut by_shift = Vec::new();
            for shift in [5.0f32, -5.0] {
                let candle = run(shift, &mut Decide::candle(THETA, REPEAT_LAST_N), &p);
                let ctrl = run(
                    shift,
                    &mut Decide::gauge("ctrl", THETA, REPEAT_LAST_N, n_vocab).unwrap(),
                    &p,
                );
                assert_eq!(
                    ctrl, candle,
                    "ctrl vs candle, shift {shift:+}, prompt {p:?}"
                );
                by_shift.push(candle);
            }
            candle_moved += usize::from(by_shift[0] != by_shift[1]);
            let plain = run(0.0, &mut Decide::candle(1.0, REPEAT_LAST_N), &p);
            penalty_acted += usize::from(plain != by_shift[0]);
            let norm: Vec<Vec<u32>> = [5.0f32, -5.0]
                .iter()
                .map(|&s| {
                    run(
                        s,
                        &mut Decide::gauge("normalized", THETA, REPEAT_LAST_N, n_vocab).unwrap(),
                        &p,
                    )
                })
                .collect();
            assert_eq!(norm[0], norm[1], "normalized under +5 vs -5, prompt {p:?}");
        }
        eprintln!(
            "candle's penalty moved by the shift on {candle_moved}/3 prompts, changed the greedy text on {penalty_acted}/3"
        );
        // The comparison has teeth: the penalty acts, and candle's operator depends on the shift.
        assert!(penalty_acted > 0 && candle_moved > 0);
    }
}
