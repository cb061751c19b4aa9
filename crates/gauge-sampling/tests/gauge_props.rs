//! Shift-invariance ("gauge") properties of the repetition controls, and their robustness.
//!
//! * `normalized` penalties and the subtractive frequency/presence penalties choose the same greedy
//!   token on `z + c` and `z − c`. The only allowed exception is an f32 near-tie: `z ± c` is itself
//!   rounded (about 2e-6 at |z| + |c| = 30), and the log-softmax and the penalty round again, so two
//!   candidates within 1e-3 of each other after the penalty may swap. The test then checks that
//!   the top two values really are that close.
//! * `ctrl` is not invariant: a fixed witness where `+c` and `−c` choose different tokens at θ = 1.3.
//! * Finite (or banned, -inf) input never yields NaN through penalties or DRY, whatever the
//!   configuration and history (including ids outside the vocabulary).
//! * `window_minus_one_means_whole_history` (regression: llama.cpp clamps -1 to 0 and silently
//!   disables the stage).
//! * Exempt ids are never penalised.
//! * The chain's sparse path for penalties and DRY leaves the same bits as `apply`.

use gauge_sampling::gauge;
use gauge_sampling::samplers::dry::{self, DryConfig};
use gauge_sampling::samplers::greedy;
use gauge_sampling::samplers::penalties::{self, PenaltiesConfig, PenaltyMode, Window};
use gauge_sampling::Overlay;
use gauge_sampling::{Candidates, Chain, Sampler, Shift, TokenId};
use proptest::prelude::*;

fn cfg(n_vocab: usize, mode: PenaltyMode, repeat: f32, freq: f32, present: f32) -> PenaltiesConfig {
    PenaltiesConfig {
        n_vocab,
        last_n: Window::Last(64),
        repeat,
        freq,
        present,
        mode,
        count_prompt: true,
        once_per_token: false,
        exempt: vec![],
    }
}

/// `stage` after `history`, applied to `z`; the resulting logits by id.
fn after(stage: &dyn Sampler, history: &[TokenId], z: &[f32]) -> Vec<f32> {
    let mut s = stage.box_clone();
    for &t in history {
        s.accept(t);
    }
    let mut cur = Candidates::from_logits(z);
    s.apply(&mut cur);
    let mut out = vec![f32::NAN; z.len()];
    for t in cur.as_slice() {
        out[t.id as usize] = t.logit;
    }
    out
}

/// llama.cpp greedy: the first maximum.
fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// The gap between the largest and the second-largest value.
fn top_two_gap(v: &[f32]) -> f32 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    s[0] - s[1]
}

fn shifted(z: &[f32], c: f32) -> Vec<f32> {
    z.iter().map(|&x| x + c).collect()
}

/// Same greedy token on `z + c` and `z − c`, unless the post-penalty top two are a near-tie.
fn assert_same_greedy(
    stage: &dyn Sampler,
    history: &[TokenId],
    z: &[f32],
    c: f32,
) -> Result<(), TestCaseError> {
    let plus = after(stage, history, &shifted(z, c));
    let minus = after(stage, history, &shifted(z, -c));
    let (tp, tm) = (argmax(&plus), argmax(&minus));
    if tp != tm {
        let gap = top_two_gap(&plus).min(top_two_gap(&minus));
        prop_assert!(
            gap < 1e-3,
            "tokens {tp} vs {tm} differ with a top-two gap of {gap} (not a rounding tie)"
        );
    }
    Ok(())
}

fn history_strategy() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..48)
}

fn ids(raw: &[u32], n: usize) -> Vec<TokenId> {
    raw.iter().map(|&r| (r as usize % n) as TokenId).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn normalized_penalty_gives_the_same_greedy_token_on_both_sides_of_the_gauge(
        z in prop::collection::vec(-20.0f32..20.0, 8..64),
        c in -10.0f32..10.0,
        raw in history_strategy(),
        theta in 1.0f32..3.0,
        freq in 0.0f32..1.0,
        present in 0.0f32..1.0,
    ) {
        let history = ids(&raw, z.len());
        let stage = penalties::build(cfg(z.len(), PenaltyMode::Normalized, theta, freq, present));
        prop_assert_eq!(stage.shift(), Shift::Invariant);
        assert_same_greedy(stage.as_ref(), &history, &z, c)?;
    }

    #[test]
    fn frequency_and_presence_give_the_same_greedy_token_on_both_sides_of_the_gauge(
        z in prop::collection::vec(-20.0f32..20.0, 8..64),
        c in -10.0f32..10.0,
        raw in history_strategy(),
        freq in 0.0f32..2.0,
        present in 0.0f32..2.0,
    ) {
        let history = ids(&raw, z.len());
        // ctrl with θ = 1 is the purely subtractive family.
        let stage = penalties::build(cfg(z.len(), PenaltyMode::Ctrl, 1.0, freq, present));
        prop_assert_eq!(stage.shift(), Shift::Invariant);
        assert_same_greedy(stage.as_ref(), &history, &z, c)?;
    }

    #[test]
    fn gauge_check_finds_an_invariant_chain_invariant(
        z in prop::collection::vec(-20.0f32..20.0, 8..64),
        c in -10.0f32..10.0,
        raw in history_strategy(),
        theta in 1.0f32..2.0,
    ) {
        let n = z.len();
        let history = ids(&raw, n);
        let chain = Chain::from_stages(n, vec![
            penalties::build(cfg(n, PenaltyMode::Normalized, theta, 0.1, 0.1)),
            dry::build(DryConfig { multiplier: 0.8, base: 1.75, allowed_length: 2, penalty_last_n: Window::All, breakers: vec![] }),
            greedy::build(),
        ]);
        prop_assert!(gauge::is_shift_invariant(&chain));
        let report = gauge::check(&chain, &z, &history, c).unwrap();
        // Final distributions agree to f32 rounding of |z| + |c| <= 30 (ulp 2e-6), through the
        // log-softmax and a penalty of at most 2.
        prop_assert!(report.max_abs_dp < 1e-4, "max |dp| = {}", report.max_abs_dp);
        if !report.tokens_agree {
            let plus = after(chain.stages()[0].as_ref(), &history, &shifted(&z, c));
            prop_assert!(top_two_gap(&plus) < 1e-3, "disagreement without a near-tie: {:?}", report);
        }
    }

    #[test]
    fn finite_input_never_yields_nan_through_penalties_or_dry(
        z in prop::collection::vec(prop_oneof![9 => -30.0f32..30.0, 1 => Just(f32::NEG_INFINITY)], 1..64),
        raw in prop::collection::vec(-3i32..80, 0..96),
        normalized in any::<bool>(),
        theta in 0.01f32..10.0,
        freq in -5.0f32..5.0,
        present in -5.0f32..5.0,
        last_n in -1i32..20,
        once in any::<bool>(),
        exempt in prop::collection::vec(0i32..64, 0..4),
        mult in 0.01f32..5.0,
        base in 1.0f32..4.0,
        allowed in -2i32..6,
        dry_last_n in -1i32..20,
        breakers in prop::collection::vec(prop::collection::vec(0i32..64, 1..3), 0..4),
    ) {
        let n = z.len();
        let mut c = cfg(n, if normalized { PenaltyMode::Normalized } else { PenaltyMode::Ctrl }, theta, freq, present);
        c.last_n = Window::from_i32(last_n);
        c.once_per_token = once;
        c.exempt = exempt;
        let pen = penalties::build(c);
        let dry = dry::build(DryConfig {
            multiplier: mult, base, allowed_length: allowed,
            penalty_last_n: Window::from_i32(dry_last_n), breakers,
        });
        for stage in [&pen, &dry] {
            let out = after(stage.as_ref(), &raw, &z);
            prop_assert!(out.iter().all(|x| !x.is_nan()), "{} produced NaN: {:?}", stage.name(), out);
            // A banned token stays banned.
            for (i, &x) in z.iter().enumerate() {
                if x == f32::NEG_INFINITY {
                    prop_assert_eq!(out[i], f32::NEG_INFINITY);
                }
            }
        }
    }

    /// The chain's sparse path (`apply_sparse` on "row + edits", no fill) must leave exactly the
    /// bits `apply` leaves on the filled array, for every configuration it accepts.
    #[test]
    fn sparse_path_gives_the_same_bits_as_apply(
        z in prop::collection::vec(-30.0f32..30.0, 1..64),
        raw in prop::collection::vec(-3i32..80, 0..96),
        normalized in any::<bool>(),
        theta in prop_oneof![Just(1.0f32), 0.5f32..3.0],
        freq in -2.0f32..2.0,
        present in -2.0f32..2.0,
        last_n in -1i32..20,
        exempt in prop::collection::vec(0i32..64, 0..4),
        allowed in 0i32..4,
        breakers in prop::collection::vec(prop::collection::vec(0i32..64, 1..3), 0..4),
    ) {
        let n = z.len();
        let mut c = cfg(n, if normalized { PenaltyMode::Normalized } else { PenaltyMode::Ctrl }, theta, freq, present);
        c.last_n = Window::from_i32(last_n);
        c.exempt = exempt;
        let stages = [
            penalties::build(c),
            dry::build(DryConfig { multiplier: 0.8, base: 1.75, allowed_length: allowed, penalty_last_n: Window::from_i32(last_n), breakers }),
        ];
        for stage in stages {
            let mut dense = stage.box_clone();
            let mut sparse = stage.box_clone();
            for &t in &raw {
                dense.accept(t);
                sparse.accept(t);
            }
            let mut cur = Candidates::from_logits(&z);
            dense.apply(&mut cur);
            let mut ov = Overlay::default();
            ov.reset(n);
            if sparse.apply_sparse(&z, &mut ov) {
                let mut via = Candidates::new();
                ov.materialize(&z, &mut via);
                let bits = |c: &Candidates| c.as_slice().iter().map(|t| (t.id, t.logit.to_bits())).collect::<Vec<_>>();
                prop_assert_eq!(bits(&via), bits(&cur), "{}", stage.name());
            } else {
                prop_assert!(normalized && theta != 1.0, "{} declined the sparse path", stage.name());
            }
        }
    }

    #[test]
    fn exempt_tokens_are_never_penalised(
        z in prop::collection::vec(-20.0f32..20.0, 8..64),
        raw in history_strategy(),
        exempt_raw in prop::collection::vec(any::<u32>(), 1..6),
        normalized in any::<bool>(),
        theta in 0.5f32..3.0,
        freq in -1.0f32..2.0,
        present in -1.0f32..2.0,
    ) {
        let n = z.len();
        let exempt = ids(&exempt_raw, n);
        // The history is full of exempt tokens, so they would be penalised if they were counted.
        let mut history = ids(&raw, n);
        history.extend(exempt.iter().chain(exempt.iter()));
        let mode = if normalized { PenaltyMode::Normalized } else { PenaltyMode::Ctrl };
        let mut c = cfg(n, mode, theta, freq, present);
        c.exempt = exempt.clone();
        let out = after(penalties::build(c).as_ref(), &history, &z);
        // Untouched: the raw logit in ctrl mode; the log-probability every unseen token gets in
        // normalized mode (θ = 1 skips the log-softmax, as the stage documents).
        let mut want = z.clone();
        if normalized && theta != 1.0 {
            penalties::log_softmax_inplace(&mut want);
        }
        for &e in &exempt {
            prop_assert_eq!(out[e as usize].to_bits(), want[e as usize].to_bits(), "exempt id {} was touched", e);
        }
    }
}

/// A fixed witness that `ctrl` reads the gauge. z = [5.0, 4.5], token 0 seen, θ = 1.3:
/// * `z + 5` = [10.0, 9.5]: 10.0 is positive and divided, 7.69 < 9.5, so token 1 wins;
/// * `z − 5` = [0.0, −0.5]: 0.0 is `<= 0` and multiplied, stays 0.0 > −0.5, so token 0 wins.
#[test]
fn ctrl_penalty_is_not_shift_invariant() {
    let (z, history, c) = ([5.0f32, 4.5], [0], 5.0f32);
    let stage = penalties::build(cfg(2, PenaltyMode::Ctrl, 1.3, 0.0, 0.0));
    assert_eq!(stage.shift(), Shift::Variant("sign branch on raw logits"));
    assert_eq!(argmax(&after(stage.as_ref(), &history, &shifted(&z, c))), 1);
    assert_eq!(
        argmax(&after(stage.as_ref(), &history, &shifted(&z, -c))),
        0
    );

    let chain = Chain::from_stages(2, vec![stage, greedy::build()]);
    assert!(!gauge::is_shift_invariant(&chain));
    assert_eq!(
        chain.shift_report()[0],
        (
            "penalties".to_string(),
            Shift::Variant("sign branch on raw logits")
        )
    );
    let report = gauge::check(&chain, &z, &history, c).unwrap();
    assert_eq!((report.token_plus, report.token_minus), (1, 0));
    assert!(!report.tokens_agree);
    // p(token 1) is σ(9.5 − 10/1.3) on one side and σ(−0.5 − 0) on the other.
    let sigma = |x: f64| 1.0 / (1.0 + (-x).exp());
    let want = sigma(9.5 - f64::from(10.0f32 / 1.3)) - sigma(-0.5);
    assert!(
        (report.max_abs_dp - want).abs() < 1e-6,
        "max |dp| {} vs {want}",
        report.max_abs_dp
    );
    assert!(want > 0.48);

    // The same witness with the normalized operator: both sides agree.
    let chain = Chain::from_stages(
        2,
        vec![
            penalties::build(cfg(2, PenaltyMode::Normalized, 1.3, 0.0, 0.0)),
            greedy::build(),
        ],
    );
    assert!(gauge::is_shift_invariant(&chain));
    let report = gauge::check(&chain, &z, &history, c).unwrap();
    assert!(
        report.tokens_agree && report.max_abs_dp < 1e-6,
        "{report:?}"
    );
}

#[test]
fn gauge_check_rejects_bad_shifts_and_rows() {
    let chain = Chain::from_stages(
        3,
        vec![
            penalties::build(cfg(3, PenaltyMode::Ctrl, 1.3, 0.0, 0.0)),
            greedy::build(),
        ],
    );
    assert!(
        gauge::check(&chain, &[0.0, 1.0, 2.0], &[2], f32::NAN).is_err(),
        "NaN shift"
    );
    assert!(
        gauge::check(&chain, &[0.0, 1.0, 2.0], &[2], f32::INFINITY).is_err(),
        "infinite shift"
    );
    assert!(
        gauge::check(&chain, &[0.0, 1.0], &[2], 1.0).is_err(),
        "wrong row length"
    );
    assert!(
        gauge::check(&chain, &[f32::MAX, 0.0, 0.0], &[], f32::MAX).is_err(),
        "z + c overflows to +inf"
    );
    assert!(gauge::check(&chain, &[0.0, 1.0, 2.0], &[2], 1.0).is_ok());
}

#[test]
fn window_minus_one_means_whole_history() {
    assert_eq!(Window::from_i32(-1), Window::All);
    let mut c = cfg(4, PenaltyMode::Ctrl, 1.0, 0.0, 1.0);
    c.last_n = Window::from_i32(-1);
    let stage = penalties::build(c);
    // llama.cpp would print `?penalties` here and penalise nothing.
    assert_eq!(stage.name(), "penalties");
    // Token 0 came 10 000 tokens ago; with the whole history as window it is still seen.
    let mut history = vec![0];
    history.extend(std::iter::repeat_n(1, 10_000));
    let out = after(stage.as_ref(), &history, &[1.0, 1.0, 1.0, 1.0]);
    assert_eq!(out, vec![0.0, 0.0, 1.0, 1.0]);

    // DRY likewise: a repeat that started 500 tokens back is seen in full.
    let stage = dry::build(DryConfig {
        multiplier: 1.0,
        base: 1.0,
        allowed_length: 2,
        penalty_last_n: Window::from_i32(-1),
        breakers: vec![],
    });
    assert_eq!(stage.name(), "dry");
    let mut history: Vec<TokenId> = vec![0, 1, 2];
    history.extend(std::iter::repeat_n(3, 500));
    history.extend([0, 1]);
    let out = after(stage.as_ref(), &history, &[0.0; 4]);
    assert_eq!(
        out,
        vec![0.0, 0.0, -1.0, 0.0],
        "token 2 extends the repeat of \"0 1\""
    );
}
