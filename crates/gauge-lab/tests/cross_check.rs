//! The lab decides on rows itself (for probe speed) with gauge-sampling's operator functions; this
//! checks its rows against gauge-sampling's `penalties` stage, the library users actually run, on
//! the same rows, shifts and histories: every operator must give bit-identical rows (and so the
//! same greedy token).

use gauge_lab::ops::{apply_row, argmax_first, Op, Penalty, SeenSet};
use gauge_lab::testing::splitmix64;
use gauge_sampling::samplers::penalties::{Penalties, PenaltiesConfig, PenaltyMode, Window};
use gauge_sampling::{Candidates, Sampler, TokenId};

fn row(seed: u64, n: usize, offset: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let r = splitmix64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
            offset + ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 24.0
        })
        .collect()
}

fn stage_row(
    z: &[f32],
    c: f32,
    op: Op,
    theta: f32,
    alpha: f32,
    prompt: &[TokenId],
    gen: &[TokenId],
) -> Vec<f32> {
    let (repeat, present, mode) = match op {
        Op::Ctrl => (theta, 0.0, PenaltyMode::Ctrl),
        Op::Normalized => (theta, 0.0, PenaltyMode::Normalized),
        Op::Subtractive => (1.0, alpha, PenaltyMode::Ctrl),
    };
    let mut st = Penalties::new(PenaltiesConfig {
        n_vocab: z.len(),
        last_n: Window::All,
        repeat,
        freq: 0.0,
        present,
        mode,
        count_prompt: true,
        once_per_token: true,
        exempt: vec![],
    });
    for &t in prompt {
        st.accept_prompt(t);
    }
    for &t in gen {
        st.accept(t);
    }
    let shifted: Vec<f32> = z.iter().map(|&v| v + c).collect();
    let mut cur = Candidates::from_logits(&shifted);
    st.apply(&mut cur);
    let mut out = vec![f32::NAN; z.len()];
    for t in cur.as_slice() {
        out[t.id as usize] = t.logit;
    }
    out
}

#[test]
fn lab_operators_agree_with_the_sampling_librarys_penalties_stage() {
    let mut compared = 0;
    for trial in 0..60u64 {
        // lengths off the 16-wide blocks too, so the summation's tail is compared
        let n = 2000 + (trial % 7) as usize;
        let offset = [-150.0f32, -5.0, 0.0, 13.0, 25.0][(trial % 5) as usize];
        let z = row(trial, n, offset);
        let prompt: Vec<TokenId> = (0..30)
            .map(|k| (splitmix64(trial * 100 + k) % n as u64) as TokenId)
            .collect();
        let gen: Vec<TokenId> = (0..40)
            .map(|k| (splitmix64(trial * 1000 + k) % 300) as TokenId)
            .collect();
        let mut seen = SeenSet::new(n, None);
        for &t in prompt.iter().chain(&gen) {
            seen.accept(t);
        }
        for &c in &[5.0f32, -5.0, 0.0] {
            for op in Op::ALL {
                // θ = 1 is "off" in both (the stage then is a no-op for ctrl/normalized).
                for &theta in &[1.1f32, 1.3, 1.5] {
                    let pen = Penalty {
                        op,
                        theta,
                        alpha: 1.0,
                    };
                    let mut lab = Vec::new();
                    apply_row(&z, c, &pen, seen.members(), &mut lab);
                    let lib = stage_row(&z, c, op, theta, 1.0, &prompt, &gen);
                    let bits = |r: &[f32]| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&lab), bits(&lib), "trial {trial} c {c} {op} θ {theta}");
                    assert_eq!(argmax_first(&lab), argmax_first(&lib));
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 60 * 3 * 3 * 3);
}
