//! Chain-level properties over random configurations, rows and histories.
//!
//! Every case is a whole llama.cpp chain built from parameters drawn from realistic ranges
//! (temperature and dynamic temperature, top-k/p, min-p, typical, top-n-sigma, XTC, penalties in
//! both modes with windows -1/0/8/64, DRY with token-id breakers, mirostat 1/2, adaptive-p, a
//! greedy terminal, sometimes a shuffled slot order), run for [`STEPS`] steps on random finite rows
//! (some `-inf` bans, sometimes heavy ties, logits centred anywhere in -10..30 so the ctrl penalty's
//! sign branch is exercised) after a random prompt. The properties:
//!
//! * the chosen token is a live candidate of the final set (not a masked `-inf` one, never a token
//!   banned in the input), and the row fast path chooses the same token as llama.cpp's fill path;
//! * after a terminal that normalises (`dist`, `mirostat`, `mirostat-v2`, `adaptive-p`) the final
//!   set's probabilities sum to 1; `greedy` promises nothing about `p`, only the argmax;
//! * the same seed gives the same tokens (two chains built independently);
//! * finite input never yields NaN (or +inf logits) in the final set;
//! * `reset` followed by a replay gives the tokens of a fresh chain.
//!
//! Case counts are bounded so the file runs in a few seconds in release and well under a minute
//! in debug.

use gauge_sampling::chain::ChainBuilder;
use gauge_sampling::params::{SamplingParams, TokenRef};
use gauge_sampling::samplers::penalties::PenaltyMode;
use gauge_sampling::synth::SplitMix64;
use gauge_sampling::{Chain, SamplerType, TokenId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Steps per run: enough for penalties, DRY and the mirostat/adaptive-p feedback to move.
const STEPS: usize = 20;

/// Cases per property (each case is a full multi-step run of one or two chains).
const CASES: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Terminal {
    /// `dist`, or mirostat when `params.mirostat != 0`.
    Dist,
    /// `adaptive_p` in the sampler list: adaptive-p replaces dist.
    AdaptiveP,
    /// `ChainBuilder::greedy` with the same stage parameters (no mirostat).
    Greedy,
}

#[derive(Clone, Debug)]
struct Case {
    n_vocab: usize,
    params: SamplingParams,
    terminal: Terminal,
    prompt: Vec<TokenId>,
    rows: Vec<Vec<f32>>,
}

/// A penalty or DRY window: the whole history, off, or a short and a typical window.
fn window() -> impl Strategy<Value = i32> {
    prop_oneof![Just(-1), Just(0), Just(8), Just(64)]
}

/// `off` half of the time, else a value from `on`.
fn or_off(off: f32, on: std::ops::Range<f32>) -> impl Strategy<Value = f32> {
    prop_oneof![Just(off), on]
}

/// The truncation and temperature fields.
#[allow(clippy::type_complexity)]
fn truncation() -> impl Strategy<Value = (f32, (f32, f32), i32, f32, f32, f32, f32, (f32, f32), i32)>
{
    (
        prop_oneof![Just(0.0f32), Just(1.0f32), 0.0f32..2.0],
        (or_off(0.0, 0.0..1.5), 0.5f32..2.0),
        prop_oneof![Just(0), Just(-1), 1..=100],
        or_off(1.0, 0.5..1.0),
        or_off(0.0, 0.0..0.3),
        or_off(1.0, 0.5..1.0),
        prop_oneof![Just(-1.0f32), Just(1.0f32), Just(2.0f32)],
        (or_off(0.0, 0.0..1.0), 0.0f32..0.6),
        0..4,
    )
}

/// Penalties: repeat (mode), window, frequency, presence, prompt counting, once-per-token.
#[allow(clippy::type_complexity)]
fn penalties(
    n: usize,
) -> impl Strategy<Value = (f32, PenaltyMode, i32, f32, f32, bool, bool, Vec<TokenId>)> {
    (
        or_off(1.0, 0.5..2.0),
        prop_oneof![Just(PenaltyMode::Ctrl), Just(PenaltyMode::Normalized)],
        window(),
        or_off(0.0, 0.0..1.0),
        or_off(0.0, 0.0..1.0),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(0..n as TokenId, 0..3),
    )
}

/// DRY: multiplier (0 = off), base, allowed length, window, token-id breakers.
fn dry(n: usize) -> impl Strategy<Value = (f32, f32, i32, i32, Vec<Vec<TokenId>>)> {
    (
        or_off(0.0, 0.1..2.0),
        1.0f32..3.0,
        0..5,
        window(),
        prop::collection::vec(prop::collection::vec(0..n as TokenId, 1..3), 0..3),
    )
}

/// Mirostat version (mostly off), tau, eta; adaptive-p target (negative = plain draw), decay.
fn feedback() -> impl Strategy<Value = (i32, f32, f32, f32, f32)> {
    (
        prop_oneof![3 => Just(0), 1 => Just(1), 1 => Just(2)],
        0.0f32..10.0,
        0.0f32..1.0,
        prop_oneof![Just(-1.0f32), 0.0f32..=1.0],
        0.0f32..=0.99,
    )
}

/// Rows as (stream seed, ban rate, ties, scale, centre); see [`make_rows`].
fn row_shape() -> impl Strategy<Value = (u64, f64, bool, f64, f64)> {
    (
        any::<u64>(),
        prop_oneof![Just(0.0), 0.0f64..0.5],
        any::<bool>(),
        0.5f64..8.0,
        -10.0f64..30.0,
    )
}

/// Four rows of `n` logits `centre + scale·N(0,1)` (rounded to halves when `ties`), each entry
/// banned (`-inf`) with probability `ban`, and at least one finite entry per row.
fn make_rows(
    n: usize,
    (seed, ban, ties, scale, centre): (u64, f64, bool, f64, f64),
) -> Vec<Vec<f32>> {
    let mut g = SplitMix64(seed);
    (0..4)
        .map(|_| {
            let mut row: Vec<f32> = (0..n)
                .map(|_| {
                    let mut x = centre + scale * g.next_normal();
                    if ties {
                        x = (x * 2.0).round() / 2.0;
                    }
                    if g.next_open01() < ban {
                        f32::NEG_INFINITY
                    } else {
                        x as f32
                    }
                })
                .collect();
            if row.iter().all(|&x| x == f32::NEG_INFINITY) {
                row[(g.next_u64() % n as u64) as usize] = centre as f32;
            }
            row
        })
        .collect()
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..=400)
        .prop_flat_map(|n| {
            (
                Just(n),
                truncation(),
                penalties(n),
                dry(n),
                feedback(),
                (0..u32::MAX, any::<bool>()),
                prop_oneof![3 => Just(Terminal::Dist), 1 => Just(Terminal::AdaptiveP), 1 => Just(Terminal::Greedy)],
                prop::collection::vec(0..n as TokenId, 0..80),
                row_shape(),
                Just(gauge_sampling::order::DEFAULT_ORDER.to_vec()).prop_shuffle(),
            )
        })
        .prop_map(|(n, tr, pen, dry, fb, (seed, shuffle), terminal, prompt, shape, shuffled)| {
            let (temperature, (dyn_range, dyn_exp), top_k, top_p, min_p, typical_p, sigma, (xtc_p, xtc_t), min_keep) = tr;
            let (repeat, mode, last_n, freq, present, penalize_prompt, once, exempt) = pen;
            let (dry_mult, dry_base, dry_allowed, dry_last_n, breakers) = dry;
            let (mirostat, tau, eta, target, decay) = fb;
            let mut samplers = if shuffle { shuffled } else { gauge_sampling::order::DEFAULT_ORDER.to_vec() };
            if terminal == Terminal::AdaptiveP {
                samplers.push(SamplerType::AdaptiveP);
            }
            let params = SamplingParams {
                temperature,
                dynatemp_range: dyn_range,
                dynatemp_exponent: dyn_exp,
                top_k,
                top_p,
                min_p,
                typical_p,
                xtc_probability: xtc_p,
                xtc_threshold: xtc_t,
                top_n_sigma: sigma,
                min_keep,
                repeat_last_n: last_n,
                repeat_penalty: repeat,
                frequency_penalty: freq,
                presence_penalty: present,
                repeat_penalty_mode: mode,
                penalize_prompt,
                penalty_once_per_token: once,
                penalty_exempt: exempt.into_iter().map(TokenRef::Id).collect(),
                dry_multiplier: dry_mult,
                dry_base,
                dry_allowed_length: dry_allowed,
                dry_penalty_last_n: dry_last_n,
                dry_sequence_breakers: None,
                dry_sequence_breaker_ids: Some(breakers),
                mirostat: if terminal == Terminal::Greedy { 0 } else { mirostat },
                mirostat_tau: tau,
                mirostat_eta: eta,
                adaptive_target: target,
                adaptive_decay: decay,
                seed,
                samplers,
                ..SamplingParams::default()
            };
            Case { n_vocab: n, params, terminal, prompt, rows: make_rows(n, shape) }
        })
}

/// The case's chain (fast path on, the default).
fn build(c: &Case) -> Chain {
    let p = &c.params;
    let built = match c.terminal {
        Terminal::Dist | Terminal::AdaptiveP => Chain::from_params(p, c.n_vocab, None),
        Terminal::Greedy => ChainBuilder::greedy(c.n_vocab)
            .with_samplers(p.samplers.clone())
            .with_seed(p.seed)
            .with_temperature(p.temperature)
            .with_dynatemp(p.dynatemp_range, p.dynatemp_exponent)
            .with_top_k(p.top_k)
            .with_top_p(p.top_p)
            .with_min_p(p.min_p)
            .with_typical_p(p.typical_p)
            .with_top_n_sigma(p.top_n_sigma)
            .with_xtc(p.xtc_probability, p.xtc_threshold)
            .with_min_keep(p.min_keep)
            .with_penalties(
                p.repeat_last_n,
                p.repeat_penalty,
                p.frequency_penalty,
                p.presence_penalty,
            )
            .with_penalty_mode(p.repeat_penalty_mode)
            .with_penalize_prompt(p.penalize_prompt)
            .with_penalty_once_per_token(p.penalty_once_per_token)
            .with_penalty_exempt(p.penalty_exempt.iter().map(|t| match t {
                TokenRef::Id(id) => *id,
                TokenRef::Text(s) => panic!("the strategy draws ids only, got {s:?}"),
            }))
            .with_dry(
                p.dry_multiplier,
                p.dry_base,
                p.dry_allowed_length,
                p.dry_penalty_last_n,
            )
            .with_dry_breaker_ids(p.dry_sequence_breaker_ids.clone().unwrap_or_default())
            .build(),
    };
    built.unwrap_or_else(|e| panic!("the strategy drew an invalid configuration: {e}"))
}

fn terminal_name(chain: &Chain) -> String {
    chain
        .stages()
        .last()
        .map(|s| s.name().to_string())
        .unwrap_or_default()
}

/// Terminals whose final set carries a normalised distribution (`greedy` leaves `p` alone).
fn normalises(terminal: &str) -> bool {
    matches!(terminal, "dist" | "mirostat" | "mirostat-v2" | "adaptive-p")
}

/// Feed the prompt, then sample and accept `STEPS` tokens, cycling over the case's rows; `each`
/// sees the chain after every step.
fn run(
    chain: &mut Chain,
    c: &Case,
    mut each: impl FnMut(&Chain, usize, TokenId) -> Result<(), TestCaseError>,
) -> Result<Vec<TokenId>, TestCaseError> {
    for &t in &c.prompt {
        chain.accept_prompt(t);
    }
    let mut out = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let row = &c.rows[step % c.rows.len()];
        let tok = chain.sample(row).map_err(|e| {
            TestCaseError::fail(format!("step {step}: a valid row was rejected: {e}"))
        })?;
        each(chain, step, tok)?;
        out.push(tok);
    }
    Ok(out)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// The chosen token is the selected, live entry of the final set and was not banned in the
    /// input; the row fast path picks the same token as the fill path at every step.
    #[test]
    fn chosen_token_is_a_live_candidate_and_fast_path_agrees(c in case()) {
        let mut fast = build(&c);
        let mut slow = build(&c).with_fast_path(false);
        let fast_tokens = run(&mut fast, &c, |ch, step, tok| {
            // The fast path may keep only the chosen candidate, but never drops it.
            let cur = ch.last_candidates();
            prop_assert_eq!(cur.selected_token(), Some(tok), "step {}", step);
            Ok(())
        })?;
        let slow_tokens = run(&mut slow, &c, |ch, step, tok| {
            let cur = ch.last_candidates();
            let sel = cur.selected.expect("sample returned Ok, so a candidate is selected");
            let chosen = cur.as_slice()[sel];
            prop_assert_eq!(chosen.id, tok, "step {}", step);
            prop_assert!(chosen.logit > f32::NEG_INFINITY, "step {}: chose masked token {}", step, tok);
            let row = &c.rows[step % c.rows.len()];
            prop_assert!(row[tok as usize].is_finite(), "step {}: chose token {} banned in the input", step, tok);
            if terminal_name(ch) == "greedy" {
                let max = cur.as_slice().iter().fold(f32::NEG_INFINITY, |m, t| m.max(t.logit));
                prop_assert_eq!(chosen.logit, max, "step {}: greedy did not pick a maximum", step);
            }
            Ok(())
        })?;
        prop_assert_eq!(fast_tokens, slow_tokens);
    }

    /// After dist, mirostat, mirostat-v2 and adaptive-p every p is in [0, 1], they sum to 1, and
    /// the chosen token has p > 0.
    #[test]
    fn normalising_terminal_leaves_probabilities_summing_to_one(c in case()) {
        let mut chain = build(&c).with_fast_path(false);
        let terminal = terminal_name(&chain);
        prop_assume!(normalises(&terminal));
        run(&mut chain, &c, |ch, step, tok| {
            let cur = ch.last_candidates();
            let sum: f64 = cur.as_slice().iter().map(|t| f64::from(t.p)).sum();
            prop_assert!((sum - 1.0).abs() < 1e-4, "step {}: {} left sum p = {}", step, terminal, sum);
            prop_assert!(cur.as_slice().iter().all(|t| (0.0..=1.0).contains(&t.p)), "step {}: p outside [0, 1]", step);
            let chosen = cur.as_slice()[cur.selected.unwrap()];
            prop_assert!(chosen.p > 0.0, "step {}: {} chose {} with p = 0", step, terminal, tok);
            Ok(())
        })?;
    }

    /// Two chains built from the same parameters (fixed seed) choose the same tokens.
    #[test]
    fn same_seed_same_tokens(c in case()) {
        let a = run(&mut build(&c), &c, |_, _, _| Ok(()))?;
        let b = run(&mut build(&c), &c, |_, _, _| Ok(()))?;
        prop_assert_eq!(a, b);
    }

    /// Finite (or banned) input never leaves NaN in the final set's p or logits, nor a +inf logit;
    /// `-inf` logits are allowed (masked candidates, as in llama.cpp).
    #[test]
    fn finite_input_never_yields_nan(c in case()) {
        for fast in [false, true] {
            let mut chain = build(&c).with_fast_path(fast);
            run(&mut chain, &c, |ch, step, _| {
                for t in ch.last_candidates().as_slice() {
                    prop_assert!(!t.p.is_nan(), "step {} fast={}: token {} has p = NaN", step, fast, t.id);
                    prop_assert!(!t.logit.is_nan() && t.logit < f32::INFINITY,
                        "step {} fast={}: token {} has logit {}", step, fast, t.id, t.logit);
                }
                Ok(())
            })?;
        }
    }

    /// `reset` forgets history and reseeds: replaying the prompt and rows gives a fresh chain's tokens.
    #[test]
    fn reset_then_replay_matches_a_fresh_chain(c in case()) {
        let mut used = build(&c);
        let first = run(&mut used, &c, |_, _, _| Ok(()))?;
        used.reset();
        let replay = run(&mut used, &c, |_, _, _| Ok(()))?;
        let fresh = run(&mut build(&c), &c, |_, _, _| Ok(()))?;
        prop_assert_eq!(&replay, &fresh);
        prop_assert_eq!(&first, &fresh);
    }
}
