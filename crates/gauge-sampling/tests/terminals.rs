//! Unit tests for the randomised stages and terminals (mirostat v1/v2, adaptive-p, XTC) and for
//! logit-bias, with expectations derived by hand in the comments or from `data/rng_reference.json`.
//!
//! Where a draw matters, the inputs are chosen so that the first and second uniform numbers of a
//! seed-42 stream pick different outcomes: a test then fails if a stage draws when it must not (or
//! does not draw when it must). The reference values are read from `rng_reference.json` (seed 42:
//! first uniform double 0.7965..., second 0.1834...; first uniform floats 0.3745..., 0.7965...).
//!
//! Worked examples from the lesson "Penalties, Logit Bias, and Sampler Chains" (Example 6 logit
//! bias, Example 8 mirostat, Example 10 XTC) are replayed where they do not depend on Java's RNG.

mod common;

use common::load_json;
use gauge_sampling::ops::softmax_impl;
use gauge_sampling::rng::Mt19937;
use gauge_sampling::samplers::adaptive_p::{self, AdaptiveP};
use gauge_sampling::samplers::logit_bias::{self, LogitBias};
use gauge_sampling::samplers::mirostat::{self, Mirostat};
use gauge_sampling::samplers::mirostat_v2::{self, MirostatV2};
use gauge_sampling::samplers::xtc::{self, Xtc};
use gauge_sampling::{Candidates, Sampler, TokenData};

const SEED: u32 = 42;

/// `{id: i, logit: logf(p_i), p: p_i}`, unsorted: how test-sampling.cpp builds its inputs.
fn from_probs(probs: &[f32]) -> Candidates {
    let data = probs
        .iter()
        .enumerate()
        .map(|(i, &p)| TokenData {
            id: i as i32,
            logit: p.ln(),
            p,
        })
        .collect();
    Candidates::from_data(data, false)
}

/// Candidates with explicit ids (to break the identity layout).
fn with_ids(ids: &[i32], logits: &[f32]) -> Candidates {
    let data = ids
        .iter()
        .zip(logits)
        .map(|(&id, &logit)| TokenData { id, logit, p: 0.0 })
        .collect();
    Candidates::from_data(data, false)
}

/// The first `n` uniform doubles of `Mt19937(42)`, from the reference file (parsed from its text:
/// serde_json's default float parser can be one ulp off).
fn reference_doubles() -> Vec<f64> {
    reference_numbers("uniform_real_double_seed42_first4")
        .iter()
        .map(|x| x.parse().unwrap())
        .collect()
}

fn reference_floats() -> Vec<f32> {
    reference_numbers("uniform_real_float_seed42_first4")
        .iter()
        .map(|x| x.parse().unwrap())
        .collect()
}

fn reference_numbers(key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(common::data_path("rng_reference.json")).unwrap();
    let at = text.find(&format!("\"{key}\"")).unwrap();
    let open = at + text[at..].find('[').unwrap();
    let close = open + text[open..].find(']').unwrap();
    text[open + 1..close]
        .split(',')
        .map(|x| x.trim().to_string())
        .collect()
}

/// libstdc++ `discrete_distribution` by hand: first index whose f64 partial sum of the normalised
/// weights is `>= u`.
fn discrete_by_hand(weights: &[f64], u: f64) -> usize {
    let sum: f64 = weights.iter().sum();
    let mut acc = 0.0;
    for (i, w) in weights.iter().enumerate() {
        acc += w / sum;
        if i + 1 == weights.len() || acc >= u {
            return i;
        }
    }
    unreachable!()
}

// ------------------------------------------------------------------------------------------------
// mirostat v2

/// The lesson's Example 8, step 0 (tau 2, eta 0.1, mu starts at 4): "kept 3 tokens, surprise 2.19
/// bits, mu now 3.98". Input p = {0.455, 0.25553, 0.19947, 0.05, 0.04} (sum 1), shuffled:
/// * surprises -log2 p = 1.14, 1.97, 2.33, 4.32, 4.64, so the cut at mu = 4 keeps 3;
/// * renormalised over 0.91: {0.5, 0.2808, 0.2192}, partial sums {0.5, 0.7808, 1};
/// * the draw is the first uniform double of seed 42, u = 0.7965 > 0.7808, so index 2 (p 0.2192);
/// * surprise -log2(0.2192) = 2.19; mu = 4 - 0.1 * (2.19 - 2) = 3.98.
///
/// With the *second* double (0.1834) the draw would be index 0, so a stray earlier draw shows.
const EX8_PROBS: [f32; 5] = [0.05, 0.25553, 0.455, 0.04, 0.19947];
const EX8_IDS_AFTER: [i32; 3] = [2, 1, 4];

fn ex8_expected(u: f64) -> (usize, f64) {
    let kept = [0.455f64, 0.25553, 0.19947];
    let idx = discrete_by_hand(&kept, u);
    let sum: f64 = kept.iter().sum();
    (idx, -(kept[idx] / sum).log2())
}

#[test]
fn mirostat_v2_lesson_example8_step0_truncates_draws_and_updates_mu() {
    let us = reference_doubles();
    let (want_idx, want_surprise) = ex8_expected(us[0]);
    assert_eq!(want_idx, 2);
    assert_ne!(
        ex8_expected(us[1]).0,
        want_idx,
        "the test must tell the first draw from the second"
    );

    let mut st = MirostatV2::new(SEED, 2.0, 0.1);
    assert_eq!(st.mu(), 4.0, "mu starts at 2 * tau");
    let mut cur = from_probs(&EX8_PROBS);
    st.apply(&mut cur);

    assert_eq!(cur.ids(), EX8_IDS_AFTER, "kept 3 tokens, sorted descending");
    assert!(cur.sorted);
    assert_eq!(cur.selected, Some(want_idx));
    assert_eq!(cur.selected_token(), Some(4));
    // p are renormalised over the survivors.
    let sum: f32 = cur.as_slice().iter().map(|t| t.p).sum();
    assert!((sum - 1.0).abs() < 1e-6);
    assert!((cur.as_slice()[2].p as f64 - 0.19947 / 0.91).abs() < 1e-6);
    // The lesson prints these rounded to 2 decimals.
    assert_eq!(format!("{want_surprise:.2}"), "2.19");
    let want_mu = 4.0 - 0.1 * (want_surprise - 2.0);
    assert!(
        (st.mu() as f64 - want_mu).abs() < 1e-5,
        "mu {} want {want_mu}",
        st.mu()
    );
    assert_eq!(format!("{:.2}", st.mu()), "3.98");
}

/// The lesson's Example 8, step 3: "kept 1 tokens, surprise 0.00 bits" raises mu by eta * tau
/// (4.03 -> 4.23 there; 4.00 -> 4.20 from a fresh stage). With one survivor libstdc++'s
/// discrete_distribution makes no draw, so the next step still uses the first uniform double.
#[test]
fn mirostat_v2_single_survivor_makes_no_draw_and_raises_mu_by_eta_tau() {
    let us = reference_doubles();
    let mut st = MirostatV2::new(SEED, 2.0, 0.1);
    // Surprises: -log2(0.97) = 0.04 <= 4, -log2(0.015) = 6.06 > 4: one survivor.
    let mut cur = from_probs(&[0.015, 0.97, 0.01, 0.005]);
    st.apply(&mut cur);
    assert_eq!(cur.ids(), [1]);
    assert_eq!(cur.selected, Some(0));
    assert_eq!(cur.as_slice()[0].p, 1.0);
    assert!((st.mu() - 4.2).abs() < 1e-6, "mu {}", st.mu());

    // mu = 4.2 still cuts the tails of EX8 (-log2 0.05 = 4.32 > 4.2), so the draw decides.
    let mut cur = from_probs(&EX8_PROBS);
    st.apply(&mut cur);
    assert_eq!(cur.ids(), EX8_IDS_AFTER);
    let (want_idx, want_surprise) = ex8_expected(us[0]);
    assert_eq!(
        cur.selected,
        Some(want_idx),
        "the single-survivor step must not have consumed a draw"
    );
    let want_mu = 4.2 - 0.1 * (want_surprise - 2.0);
    assert!((st.mu() as f64 - want_mu).abs() < 1e-5);
}

#[test]
fn mirostat_v2_single_candidate_input_does_not_advance_rng() {
    let mut st = MirostatV2::new(SEED, 5.0, 0.1);
    for _ in 0..3 {
        let mut cur = from_probs(&[1.0]);
        st.apply(&mut cur);
        assert_eq!(cur.selected, Some(0));
    }
    // Compare the next draw with a fresh generator: same weights, same index.
    let mut cur = from_probs(&EX8_PROBS);
    st.apply(&mut cur); // mu = 10 + 3 * 0.5 keeps all five
    assert_eq!(cur.len(), 5);
    let weights: Vec<f32> = cur.as_slice().iter().map(|t| t.p).collect();
    let want = Mt19937::new(SEED).discrete(weights.iter().copied());
    assert_eq!(cur.selected, Some(want));
    // And that index differs from what a once-advanced stream would give.
    let mut advanced = Mt19937::new(SEED);
    advanced.uniform_f64();
    assert_ne!(advanced.discrete(weights.iter().copied()), want);
}

#[test]
fn mirostat_v2_reset_restores_mu_and_reseeds() {
    let mut st = MirostatV2::new(SEED, 2.0, 0.1);
    let mut a = from_probs(&EX8_PROBS);
    st.apply(&mut a);
    let mu_after_first = st.mu();
    st.reset();
    assert_eq!(st.mu(), 4.0);
    let mut b = from_probs(&EX8_PROBS);
    st.apply(&mut b);
    assert_eq!(b.selected, a.selected);
    assert_eq!(st.mu(), mu_after_first);
}

// ------------------------------------------------------------------------------------------------
// mirostat v1

/// Zipf probabilities p_i ∝ (i+1)^-s over `n` tokens, presented in reverse order.
fn zipf_reversed(s: f64, n: usize) -> Candidates {
    let w: Vec<f64> = (0..n).map(|i| ((i + 1) as f64).powf(-s)).collect();
    let z: f64 = w.iter().sum();
    let logits: Vec<f32> = w.iter().map(|x| (x / z).ln() as f32).collect();
    let ids: Vec<i32> = (0..n as i32).rev().collect();
    let rev: Vec<f32> = logits.iter().rev().copied().collect();
    with_ids(&ids, &rev)
}

/// The paper's k with an exact Zipf exponent: s_hat = s because b_i = ln(p_i/p_{i+1}) = s * t_i.
fn k_by_hand(s: f64, mu: f64, n_vocab: f64) -> f64 {
    let eps = s - 1.0;
    (eps * 2f64.powf(mu) / (1.0 - n_vocab.powf(-eps))).powf(1.0 / s)
}

/// s = 2, tau = 5 (mu = 10), N = 1000: k = (1 * 1024 / (1 - 1/1000))^(1/2) = sqrt(1025.03) = 32.02,
/// so mirostat keeps the top 32.
#[test]
fn mirostat_v1_k_on_a_zipf_distribution() {
    let want_k = k_by_hand(2.0, 10.0, 1000.0);
    assert!((want_k - 32.016).abs() < 1e-3);
    let mut st = Mirostat::new(1000, SEED, 5.0, 0.1, 100);
    let mut cur = zipf_reversed(2.0, 100);
    softmax_impl(&mut cur, true);
    let p: Vec<f32> = cur.as_slice().iter().map(|t| t.p).collect();
    let k = st.estimate_k(&p) as f64;
    assert!((k - want_k).abs() < 1e-3 * want_k, "k {k} want {want_k}");

    let mut cur = zipf_reversed(2.0, 100);
    st.apply(&mut cur);
    assert_eq!(cur.len(), 32);
    assert_eq!(cur.ids(), (0..32).collect::<Vec<i32>>());
    let sum: f32 = cur.as_slice().iter().map(|t| t.p).sum();
    assert!((sum - 1.0).abs() < 1e-5, "renormalised over the 32");
    // mu moves by eta * (tau - surprise of the renormalised p of the drawn token).
    let idx = cur.selected.unwrap();
    let surprise = -(cur.as_slice()[idx].p as f64).log2();
    assert!((st.mu() as f64 - (10.0 - 0.1 * (surprise - 5.0))).abs() < 1e-5);
}

/// k uses the full vocabulary size, not the number of candidates. s = 1.1, tau = 3 (mu = 6), 200
/// candidates: with N = 1000, k = (0.1 * 64 / (1 - 1000^-0.1))^(1/1.1) = 10.17 -> 10 tokens; with
/// N = 200 it would be (6.4 / 0.4112)^(0.909) = 12.1 -> 12 tokens.
#[test]
fn mirostat_v1_k_uses_the_full_vocab_size() {
    let want_k = k_by_hand(1.1, 6.0, 1000.0);
    assert_eq!(want_k as i32, 10);
    assert_eq!(k_by_hand(1.1, 6.0, 200.0) as i32, 12);
    let mut st = Mirostat::new(1000, SEED, 3.0, 0.1, 100);
    let mut cur = zipf_reversed(1.1, 200);
    st.apply(&mut cur);
    assert_eq!(cur.len(), 10);
}

/// With every probability equal, s_hat = 0: eps = -1 and the base is 2^mu / (N - 1) = 1024 / 99 > 1,
/// raised to 1/0 = inf. The x86-64 reference converts `int(inf)` to INT_MIN, and `max(., 1)` keeps a
/// single token (a saturating conversion would keep all 50).
#[test]
fn mirostat_v1_overflowing_k_keeps_one_token_like_the_x86_build() {
    let mut st = Mirostat::new(100, SEED, 5.0, 0.1, 100);
    let mut cur = with_ids(&(0..50).collect::<Vec<i32>>(), &[0.25; 50]);
    st.apply(&mut cur);
    assert_eq!(cur.len(), 1);
    assert_eq!(cur.selected, Some(0));
    assert_eq!(cur.as_slice()[0].p, 1.0);
    // surprise 0: mu = 10 + 0.1 * 5.
    assert!((st.mu() - 10.5).abs() < 1e-6);
}

/// One candidate: the s_hat sums are empty (0/0 = NaN), k is NaN, `int(NaN)` is INT_MIN, so k = 1;
/// discrete_distribution makes no draw; surprise 0 raises mu by eta * tau.
#[test]
fn mirostat_v1_single_candidate_makes_no_draw() {
    let mut st = Mirostat::new(1000, SEED, 5.0, 0.1, 100);
    for step in 1..=2 {
        let mut cur = with_ids(&[7], &[-3.0]);
        st.apply(&mut cur);
        assert_eq!(cur.selected, Some(0));
        assert_eq!(cur.selected_token(), Some(7));
        assert!((st.mu() - (10.0 + 0.5 * step as f32)).abs() < 1e-5);
    }
    // Now a step where the draw matters: s = 2, N = 1000, mu = 11: k = (2048/0.999)^0.5 = 45.3,
    // so all 40 candidates stay; the index must be the one a fresh generator gives.
    let mut cur = zipf_reversed(2.0, 40);
    st.apply(&mut cur);
    assert_eq!(cur.len(), 40);
    let weights: Vec<f32> = cur.as_slice().iter().map(|t| t.p).collect();
    let want = Mt19937::new(SEED).discrete(weights.iter().copied());
    assert_eq!(cur.selected, Some(want));
    let mut advanced = Mt19937::new(SEED);
    advanced.uniform_f64();
    assert_ne!(
        advanced.discrete(weights.iter().copied()),
        want,
        "the test must tell the streams apart"
    );
}

#[test]
fn mirostat_v1_reset_restores_mu() {
    let mut st = Mirostat::new(1000, SEED, 5.0, 0.1, 100);
    let mut cur = zipf_reversed(2.0, 100);
    st.apply(&mut cur);
    assert_ne!(st.mu(), 10.0);
    st.reset();
    assert_eq!(st.mu(), 10.0);
}

#[test]
fn mirostat_names_and_builders() {
    assert_eq!(
        mirostat::build(1000, SEED, 5.0, 0.1, 100).name(),
        "mirostat"
    );
    assert_eq!(mirostat_v2::build(SEED, 5.0, 0.1).name(), "mirostat-v2");
}

#[test]
fn mirostat_on_an_empty_set_selects_nothing_instead_of_panicking() {
    let mut cur = Candidates::new();
    Mirostat::new(10, SEED, 5.0, 0.1, 100).apply(&mut cur);
    assert_eq!(cur.selected, None);
    MirostatV2::new(SEED, 5.0, 0.1).apply(&mut cur);
    assert_eq!(cur.selected, None);
    AdaptiveP::new(0.5, 0.9, SEED).apply(&mut cur);
    assert_eq!(cur.selected, None);
}

// ------------------------------------------------------------------------------------------------
// logit-bias

#[test]
fn logit_bias_fast_path_adds_every_duplicate_entry() {
    // Identity layout: data[3].id == 3, so both entries take the fast path: +1.0 +0.5.
    let mut lb = LogitBias::new(6, vec![(3, 1.0), (3, 0.5)]);
    let mut cur = with_ids(&[0, 1, 2, 3, 4, 5], &[0.0; 6]);
    lb.apply(&mut cur);
    assert_eq!(cur.as_slice()[3].logit, 1.5);
    assert!(cur
        .as_slice()
        .iter()
        .enumerate()
        .all(|(i, t)| i == 3 || t.logit == 0.0));
}

#[test]
fn logit_bias_slow_path_adds_only_the_first_matching_entry() {
    // Reversed layout: data[3].id == 2, so both entries for token 3 go to the search list and only
    // the first one (+1.0) is applied.
    let mut lb = LogitBias::new(6, vec![(3, 1.0), (3, 0.5)]);
    let mut cur = with_ids(&[5, 4, 3, 2, 1, 0], &[0.0; 6]);
    lb.apply(&mut cur);
    let t3 = cur.as_slice().iter().find(|t| t.id == 3).unwrap();
    assert_eq!(t3.logit, 1.0);
    assert_eq!(cur.as_slice().iter().filter(|t| t.logit != 0.0).count(), 1);
}

#[test]
fn logit_bias_mixed_paths_in_one_array() {
    // ids [0, 2, 1, 3]: tokens 0 and 3 are in place (fast path, duplicates add), 1 and 2 are
    // swapped (slow path, first entry only).
    let mut lb = LogitBias::new(
        4,
        vec![(0, 1.0), (1, 2.0), (0, 1.0), (1, 5.0), (3, -1.0), (2, 0.25)],
    );
    let mut cur = with_ids(&[0, 2, 1, 3], &[0.0; 4]);
    lb.apply(&mut cur);
    let logit = |id: i32| cur.as_slice().iter().find(|t| t.id == id).unwrap().logit;
    assert_eq!(logit(0), 2.0);
    assert_eq!(logit(1), 2.0);
    assert_eq!(logit(2), 0.25);
    assert_eq!(logit(3), -1.0);
    assert_eq!(cur.ids(), [0, 2, 1, 3], "logit-bias never reorders");
}

#[test]
fn logit_bias_ignores_absent_and_out_of_range_tokens() {
    let mut lb = LogitBias::new(
        4,
        vec![(-1, 3.0), (99, 3.0), (i32::MAX, 3.0), (i32::MIN, 3.0)],
    );
    let mut cur = with_ids(&[0, 1, 2, 3], &[0.5, 0.25, 0.125, 0.0]);
    lb.apply(&mut cur);
    let logits: Vec<f32> = cur.as_slice().iter().map(|t| t.logit).collect();
    assert_eq!(logits, [0.5, 0.25, 0.125, 0.0]);
}

#[test]
fn logit_bias_does_not_touch_the_sorted_flag() {
    // A bias that breaks the order still leaves `sorted` as it was (llama.cpp does not clear it).
    let mut lb = LogitBias::new(3, vec![(2, 10.0)]);
    let mut cur = Candidates::from_data(
        vec![
            TokenData {
                id: 0,
                logit: 3.0,
                p: 0.0,
            },
            TokenData {
                id: 1,
                logit: 2.0,
                p: 0.0,
            },
            TokenData {
                id: 2,
                logit: 1.0,
                p: 0.0,
            },
        ],
        true,
    );
    lb.apply(&mut cur);
    assert!(cur.sorted);
    assert_eq!(cur.as_slice()[2].logit, 11.0);
    let mut cur = with_ids(&[0, 1, 2], &[1.0, 2.0, 3.0]);
    lb.apply(&mut cur);
    assert!(!cur.sorted);
}

#[test]
fn logit_bias_placeholder_when_empty() {
    assert_eq!(logit_bias::build(10, vec![]).name(), "?logit-bias");
    assert_eq!(logit_bias::build(10, vec![(1, 1.0)]).name(), "logit-bias");
}

/// The lesson's Example 6: logits {2, 1, 0.5, 0.1, -0.5, -1} for "the cat sat mat dog ran"; ban
/// "the" with -inf, +2.0 on "mat", -100 on "dog". Softmax afterwards, printed to 4 decimals:
/// 0.0000 0.2107 0.1278 0.6330 0.0000 0.0285. The banned token is exactly 0; "dog" is not: its
/// expf(-102.6) is the subnormal 2.8e-45, which after dividing by the sum (1.58) is still 1.4e-45.
#[test]
fn logit_bias_lesson_example6() {
    let mut lb = logit_bias::build(6, vec![(0, f32::NEG_INFINITY), (3, 2.0), (4, -100.0)]);
    let mut cur = Candidates::from_logits(&[2.0, 1.0, 0.5, 0.1, -0.5, -1.0]);
    lb.apply(&mut cur);
    softmax_impl(&mut cur, false);
    let want = [0.0000, 0.2107, 0.1278, 0.6330, 0.0000, 0.0285];
    for (t, &w) in cur.as_slice().iter().zip(&want) {
        assert!((t.p - w).abs() < 5e-5, "token {} p {} want {w}", t.id, t.p);
    }
    assert_eq!(cur.as_slice()[0].p, 0.0, "-inf bans the token");
    assert!(
        cur.as_slice()[4].p > 0.0,
        "-100 makes the token very unlikely, not impossible"
    );
}

// ------------------------------------------------------------------------------------------------
// XTC

/// Seed 42's float draws are 0.3745 then 0.7965 (rng_reference.json). With probability 0.5 the
/// first draw fires and the second skips, so whether a call consumed a draw is observable.
const XTC_PROB: f32 = 0.5;

#[test]
fn xtc_reference_draws_straddle_the_probability() {
    let f = reference_floats();
    assert!(f[0] <= XTC_PROB && f[1] > XTC_PROB);
}

/// Example 10's input, {0.50, 0.30, 0.10, 0.06, 0.04}, presented out of order (XTC sorts when it
/// fires).
fn ex10_input() -> Candidates {
    with_ids(
        &[3, 0, 4, 2, 1],
        &[
            0.06f32.ln(),
            0.5f32.ln(),
            0.04f32.ln(),
            0.1f32.ln(),
            0.3f32.ln(),
        ],
    )
}

/// The lesson's Example 10 (probability 1, threshold 0.1): 0.50, 0.30 and 0.10 reach the threshold,
/// the two most likely are removed and 0.10 stays. XTC itself does not renormalise (p stay 0.10,
/// 0.06, 0.04); the dist step after it gives the lesson's 0.5, 0.3, 0.2.
///
/// The threshold here is 0.099, not 0.1: see `xtc_threshold_at_a_probability_is_decided_in_f32`.
#[test]
fn xtc_lesson_example10() {
    let mut st = Xtc::new(1.0, 0.099, 1, SEED);
    let mut cur = ex10_input();
    st.apply(&mut cur);
    assert_eq!(cur.ids(), [2, 3, 4]);
    assert!(cur.sorted);
    let p: Vec<f32> = cur.as_slice().iter().map(|t| t.p).collect();
    for (got, want) in p.iter().zip([0.10, 0.06, 0.04]) {
        assert!(
            (got - want).abs() < 1e-6,
            "stale softmax p {got} want {want}"
        );
    }
    let sum: f32 = p.iter().sum();
    for (got, want) in p.iter().zip([0.5, 0.3, 0.2]) {
        assert!(
            (got / sum - want).abs() < 5e-4,
            "renormalised {} want {want}",
            got / sum
        );
    }
}

/// With the lesson's exact threshold 0.1, llama.cpp's f32 softmax decides: the running f32 sum of
/// expf(logf(p_i) - logf(0.5)) is 2.0, and expf(logf(0.1f) - logf(0.5f)) / 2 = 0.099999994, just
/// below 0.1f = 0.100000001. So the 0.10 token does not count as "above the threshold" and only the
/// top token is removed, unlike the lesson's double-precision run. (This is why test-sampling.cpp
/// uses thresholds such as 0.09f, 0.19f.)
#[test]
fn xtc_threshold_at_a_probability_is_decided_in_f32() {
    let mut st = Xtc::new(1.0, 0.1, 1, SEED);
    let mut cur = ex10_input();
    st.apply(&mut cur);
    assert_eq!(cur.ids(), [1, 2, 3, 4]);
    let p_010 = cur.as_slice()[1].p;
    assert!(
        p_010 < 0.1f32 && (p_010 - 0.1).abs() < 1e-7,
        "p of the 0.10 token is {p_010:.9}"
    );
}

#[test]
fn xtc_single_candidate_makes_no_draw() {
    let mut st = Xtc::new(XTC_PROB, 0.1, 0, SEED);
    for _ in 0..3 {
        let mut one = from_probs(&[1.0]);
        st.apply(&mut one);
        assert_eq!(one.ids(), [0]);
        assert!(!one.sorted);
    }
    // The next call still sees the first float draw (0.37 <= 0.5), so it fires.
    let mut cur = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut cur);
    assert_eq!(
        cur.ids(),
        [2],
        "fired: 0.5 and 0.3 removed, 0.2 (the least probable >= 0.1) kept"
    );
}

#[test]
fn xtc_coin_above_probability_skips_and_leaves_the_array_untouched() {
    let mut st = Xtc::new(XTC_PROB, 0.1, 0, SEED);
    let mut first = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut first); // draw 0.37: fires
    assert_eq!(first.ids(), [2]);
    let mut second = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut second); // draw 0.80 > 0.5: skip, no sort, no softmax
    assert_eq!(second.ids(), [0, 1, 2]);
    assert!(!second.sorted);
    assert_eq!(second.as_slice()[1].p, 0.5, "p untouched");
}

#[test]
fn xtc_disabled_parameters_do_nothing() {
    assert_eq!(xtc::build(0.0, 0.1, 1, SEED).name(), "?xtc");
    assert_eq!(xtc::build(0.5, 0.51, 1, SEED).name(), "?xtc");
    assert_eq!(xtc::build(0.5, 0.5, 1, SEED).name(), "xtc");
    // The live struct with disabling parameters checks them before any draw.
    for (p, t) in [(0.0, 0.1), (-1.0, 0.1), (1.0, 0.6)] {
        let mut st = Xtc::new(p, t, 0, SEED);
        let mut cur = from_probs(&[0.3, 0.5, 0.2]);
        st.apply(&mut cur);
        assert_eq!(cur.ids(), [0, 1, 2]);
        assert!(!cur.sorted);
    }
}

#[test]
fn xtc_firing_with_one_token_above_threshold_still_sorts() {
    // Only 0.6 >= 0.5, so pos_last = 0 and nothing is removed, but the array is now sorted with
    // fresh softmax p (docs/SPEC.md §6.4).
    let mut st = Xtc::new(1.0, 0.5, 0, SEED);
    let mut cur = from_probs(&[0.1, 0.6, 0.3]);
    st.apply(&mut cur);
    assert_eq!(cur.ids(), [1, 2, 0]);
    assert!(cur.sorted);
}

#[test]
fn xtc_min_keep_blocks_the_removal() {
    // {0.5, 0.3, 0.2} at threshold 0.15: pos_last = 2, size - pos_last = 1.
    let mut keep2 = Xtc::new(1.0, 0.15, 2, SEED);
    let mut cur = from_probs(&[0.3, 0.5, 0.2]);
    keep2.apply(&mut cur);
    assert_eq!(
        cur.ids(),
        [1, 0, 2],
        "min_keep 2 > 1: sorted but nothing removed"
    );
    let mut keep1 = Xtc::new(1.0, 0.15, 1, SEED);
    let mut cur = from_probs(&[0.3, 0.5, 0.2]);
    keep1.apply(&mut cur);
    assert_eq!(cur.ids(), [2]);
}

#[test]
fn xtc_reset_reseeds() {
    let mut st = Xtc::new(XTC_PROB, 0.1, 0, SEED);
    let mut a = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut a); // fires
    let mut b = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut b); // skips
    st.reset();
    let mut c = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut c); // first draw again: fires
    assert_eq!(
        (a.ids(), b.ids(), c.ids()),
        (vec![2], vec![0, 1, 2], vec![2])
    );
}

#[test]
fn xtc_clone_continues_the_same_stream() {
    let mut st: Box<dyn Sampler> = xtc::build(XTC_PROB, 0.1, 0, SEED);
    let mut cur = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut cur); // consumes the first draw
    let mut copy = st.box_clone();
    let mut x = from_probs(&[0.3, 0.5, 0.2]);
    let mut y = from_probs(&[0.3, 0.5, 0.2]);
    st.apply(&mut x);
    copy.apply(&mut y);
    assert_eq!(x.ids(), [0, 1, 2], "second draw skips");
    assert_eq!(y.ids(), x.ids());
}

// ------------------------------------------------------------------------------------------------
// adaptive-p

#[test]
fn adaptive_p_decay_is_clamped() {
    assert_eq!(AdaptiveP::new(0.5, 1.5, SEED).decay(), 0.99);
    assert_eq!(AdaptiveP::new(0.5, -0.2, SEED).decay(), 0.0);
    assert_eq!(AdaptiveP::new(0.5, 0.9, SEED).decay(), 0.9);
    assert_eq!(adaptive_p::build(0.5, 0.9, SEED).name(), "adaptive-p");
}

/// Fresh EMA = target, so the adapted target is 2*0.3 - 0.3 = 0.3. For p = {0.5, 0.3, 0.2}:
/// d = |p - 0.3| / 0.3 = {2/3, 0, 1/3}; logit = 5 - 10 d²/(1+d) = {5 - 4.444/1.667, 5, 5 - 1.111/1.333}
/// = {2.3333, 5, 4.1667}. The draw is over the softmax of those logits with the first uniform double.
#[test]
fn adaptive_p_reshapes_logits_around_the_target_and_draws_from_them() {
    let mut st = AdaptiveP::new(0.3, 0.9, SEED);
    assert!((st.adapted_target() - 0.3).abs() < 1e-6);
    let mut cur = from_probs(&[0.5, 0.3, 0.2]);
    st.apply(&mut cur);
    let logits: Vec<f32> = cur.as_slice().iter().map(|t| t.logit).collect();
    for (got, want) in logits.iter().zip([7.0 / 3.0, 5.0, 25.0 / 6.0]) {
        assert!((got - want).abs() < 1e-4, "logit {got} want {want}");
    }
    assert_eq!(cur.ids(), [0, 1, 2], "no sort");
    let w: Vec<f64> = [7.0f64 / 3.0, 5.0, 25.0 / 6.0]
        .iter()
        .map(|l| (l - 5.0).exp())
        .collect();
    let us = reference_doubles();
    assert_eq!(cur.selected, Some(discrete_by_hand(&w, us[0])));
}

#[test]
fn adaptive_p_keeps_masked_tokens_masked() {
    let mut st = AdaptiveP::new(0.3, 0.9, SEED);
    let mut cur = with_ids(&[0, 1, 2], &[0.0, f32::NEG_INFINITY, -1.0]);
    st.apply(&mut cur);
    assert_eq!(cur.as_slice()[1].logit, f32::NEG_INFINITY);
    assert_eq!(cur.as_slice()[1].p, 0.0);
    assert_ne!(cur.selected, Some(1));
}

/// The EMA only moves when the accepted token is the one adaptive-p selected. After accepting it,
/// weighted_sum = p_orig + 0.9 * (0.3/0.1) and total_weight = 1 + 0.9 * 10 = 10.
#[test]
fn adaptive_p_ema_updates_only_for_its_own_token() {
    let probs = [0.5f32, 0.3, 0.2];
    let mut st = AdaptiveP::new(0.3, 0.9, SEED);
    let mut cur = from_probs(&probs);
    st.apply(&mut cur);
    let chosen = cur.selected_token().unwrap();
    st.accept(chosen + 100); // someone else's token (e.g. a grammar override)
    assert!((st.ema() - 0.3).abs() < 1e-6, "EMA unchanged");

    let mut cur = from_probs(&probs);
    st.apply(&mut cur);
    let chosen = cur.selected_token().unwrap();
    let p_orig = probs[chosen as usize] as f64;
    st.accept(chosen);
    let want = (p_orig + 0.9 * 3.0) / (1.0 + 0.9 * 10.0);
    assert!(
        (st.ema() as f64 - want).abs() < 1e-5,
        "ema {} want {want}",
        st.ema()
    );
    // A second accept without a new apply has nothing pending.
    st.accept(chosen);
    assert!((st.ema() as f64 - want).abs() < 1e-5);
    // reset primes the EMA at the target again.
    st.reset();
    assert!((st.ema() - 0.3).abs() < 1e-6);
}

#[test]
fn adaptive_p_negative_target_just_samples_the_softmax() {
    let mut st = AdaptiveP::new(-1.0, 0.9, SEED);
    let mut cur = from_probs(&[0.2, 0.5, 0.3]);
    let before: Vec<f32> = cur.as_slice().iter().map(|t| t.logit).collect();
    st.apply(&mut cur);
    let after: Vec<f32> = cur.as_slice().iter().map(|t| t.logit).collect();
    assert_eq!(before, after, "no reshaping");
    // u = 0.7965 over partial sums {0.2, 0.7, 1.0}: index 2.
    let us = reference_doubles();
    assert_eq!(
        cur.selected,
        Some(discrete_by_hand(&[0.2, 0.5, 0.3], us[0]))
    );
    assert_eq!(cur.selected, Some(2));
}

// ------------------------------------------------------------------------------------------------
// shift invariance

/// All five stages report `Invariant`, and a constant added to every logit leaves their output
/// (ids, order, selection) unchanged on a generic input.
#[test]
fn stages_are_shift_invariant() {
    let logits = [0.3f32, -1.2, 2.5, 0.9, -0.4, 1.7, -2.2, 0.0];
    let shifted: Vec<f32> = logits.iter().map(|l| l + 6.5).collect();
    let make: Vec<Box<dyn Fn() -> Box<dyn Sampler>>> = vec![
        Box::new(|| xtc::build(1.0, 0.1, 1, SEED)),
        Box::new(|| mirostat::build(8, SEED, 1.5, 0.1, 100)),
        Box::new(|| mirostat_v2::build(SEED, 1.5, 0.1)),
        Box::new(|| adaptive_p::build(0.3, 0.9, SEED)),
        Box::new(|| logit_bias::build(8, vec![(2, -1.0), (6, 3.0)])),
    ];
    for mk in make {
        let (mut a, mut b) = (mk(), mk());
        assert!(a.shift().is_invariant(), "{}", a.name());
        for _ in 0..4 {
            let mut x = Candidates::from_logits(&logits);
            let mut y = Candidates::from_logits(&shifted);
            a.apply(&mut x);
            b.apply(&mut y);
            assert_eq!(x.ids(), y.ids(), "{}", a.name());
            assert_eq!(x.selected, y.selected, "{}", a.name());
            if let Some(t) = x.selected_token() {
                a.accept(t);
                b.accept(t);
            }
        }
    }
}

#[test]
fn reference_file_present() {
    // Guard: the expectations above come from this file.
    assert!(load_json("rng_reference.json")["uniform_real_double_seed42_first4"].is_array());
}
