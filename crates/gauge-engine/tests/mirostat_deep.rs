//! mirostat-v2 deep into a generation, on the default model's own rows. The model is confident,
//! the drawn tokens' surprise stays below tau, and `mu` grows until the cut keeps (nearly) the whole
//! vocabulary; from then on gauge draws without sorting (`kernels::wide_draw`, counted by the
//! `testing` feature's `wide_draws`). Two checks on that path: against llama.cpp's own chain on a
//! live generation, and against gauge's fill path (llama.cpp's full sort, ported) on rows captured
//! after 96 greedy tokens, comparing the token, the drawn candidate's bits and `mu` at every step.

mod common;

use gauge_engine::bench::RowSet;
use gauge_sampling::chain::testing::counts;
use gauge_sampling::params::SamplingParams;
use gauge_sampling::Chain;

fn mirostat_v2(seed: u32) -> SamplingParams {
    SamplingParams {
        seed,
        mirostat: 2,
        mirostat_tau: 5.0,
        mirostat_eta: 0.1,
        ..Default::default()
    }
}

#[test]
fn mirostat_v2_deep_in_a_generation_matches_llama_cpp() {
    let before = counts();
    common::run_case_steps(
        &common::model(),
        "mirostat v2, 240 steps",
        mirostat_v2(77),
        240,
    );
    let d = counts() - before;
    assert!(
        d.wide_draws > 0,
        "mu never grew far enough for the wide path: {d:?}"
    );
}

fn mu(c: &Chain) -> u32 {
    let st = c.stages().last().unwrap().explain_state();
    assert_eq!(st[0].0, "mu");
    st[0].1.to_bits()
}

#[test]
fn mirostat_v2_wide_path_matches_the_fill_path_on_deep_model_rows() {
    let model = common::model();
    let set = RowSet::from_model_at(&model, "deep", 8, 2, 96).unwrap();
    let n_vocab = model.n_vocab();
    let chain = Chain::from_params(&mirostat_v2(5), n_vocab, None).unwrap();
    let mut fast = chain.clone().with_fast_path(true);
    let mut slow = chain.with_fast_path(false);
    let before = counts();
    let steps = 400;
    for step in 0..steps {
        let row = &set.rows[step % set.rows.len()];
        let a = fast.sample(row).unwrap();
        let b = slow.sample(row).unwrap();
        assert_eq!(a, b, "step {step}: fast path chose {a}, fill path {b}");
        let sel = |c: &Chain| {
            let cur = c.last_candidates();
            let t = cur.as_slice()[cur.selected.unwrap()];
            (t.id, t.logit.to_bits(), t.p.to_bits())
        };
        assert_eq!(sel(&fast), sel(&slow), "step {step}: drawn candidate");
        assert_eq!(mu(&fast), mu(&slow), "step {step}: mu");
    }
    let d = counts() - before;
    assert_eq!(d.fill, steps as u64, "{d:?}");
    // mu reaches the whole vocabulary within ~170 steps on these rows (docs/bench.md)
    assert!(
        d.wide_draws >= steps as u64 / 2,
        "the wide path drew only {} of {steps} steps: {d:?}",
        d.wide_draws
    );
    assert_eq!(
        slow.last_candidates().len(),
        n_vocab,
        "the cut keeps everything by now"
    );
}
