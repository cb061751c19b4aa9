//! What every experiment's grid is made of: runs (an operator at a θ under a shift), the plan of
//! runs decoded for every prompt, the chunks prompts are decoded in, and the checks of the fields
//! every grid shares.

use crate::error::LabError;
use crate::ops::{Op, Penalty};

/// One greedy decode of one prompt: the operator, θ, α and the gauge shift `c`. `role` is the
/// experiment's own tag for what the run is for (the probe's flip sides and zero-point runs);
/// experiments that need none use `()`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSpec<R = ()> {
    pub role: R,
    pub op: Op,
    pub theta: f32,
    pub c: f32,
    pub alpha: f32,
}

impl<R> RunSpec<R> {
    /// The operator of this run.
    pub fn penalty(&self) -> Penalty {
        Penalty {
            op: self.op,
            theta: self.theta,
            alpha: self.alpha,
        }
    }
}

/// The plan of experiments without a gauge shift: every op at every θ, op-major, `c = 0`.
pub fn op_theta_plan(ops: &[Op], thetas: &[f32], alpha: f32) -> Vec<RunSpec> {
    ops.iter()
        .flat_map(|&op| {
            thetas.iter().map(move |&theta| RunSpec {
                role: (),
                op,
                theta,
                c: 0.0,
                alpha,
            })
        })
        .collect()
}

/// How an experiment's prompts are cut into chunks decoded together: a chunk is the resumption
/// unit, and all its runs may be live at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunking {
    /// Prompts (prefixes, schemas, problems) in the run.
    pub prompts: usize,
    /// Prompts per chunk (>= 1).
    pub batch: usize,
    /// Runs decoded per prompt.
    pub runs_per_prompt: usize,
}

impl Chunking {
    /// Number of chunks.
    pub fn n_chunks(&self) -> usize {
        self.prompts.div_ceil(self.batch)
    }

    /// The prompt indices of chunk `k`.
    pub fn chunk(&self, k: usize) -> std::ops::Range<usize> {
        let a = k * self.batch;
        a..(a + self.batch).min(self.prompts)
    }

    /// Most sequences a chunk can hold live at once (every run of every prompt diverged).
    pub fn max_sequences(&self) -> usize {
        self.batch * self.runs_per_prompt
    }

    /// The largest batch (at most the current one, at least 1) whose chunks never need more than
    /// `n_seq_max` sequences.
    pub fn fitted_batch(&self, n_seq_max: usize) -> usize {
        self.batch
            .min((n_seq_max / self.runs_per_prompt.max(1)).max(1))
    }
}

/// An experiment's configuration as the core sees it: how its prompts are cut into chunks. The
/// chunk arithmetic comes with it.
pub trait Grid {
    /// Prompts, prompts per chunk (the configuration's `batch_*` field), runs per prompt.
    fn chunking(&self) -> Chunking;
    /// Set the configuration's prompts per chunk.
    fn set_batch(&mut self, batch: usize);

    /// Number of chunks.
    fn n_chunks(&self) -> usize {
        self.chunking().n_chunks()
    }

    /// The prompt indices of chunk `k`.
    fn chunk(&self, k: usize) -> std::ops::Range<usize> {
        self.chunking().chunk(k)
    }

    /// Most sequences a chunk can hold live at once (every run of every prompt diverged): the
    /// source must allow this many.
    fn max_sequences_per_chunk(&self) -> usize {
        self.chunking().max_sequences()
    }

    /// Shrink the batch so a chunk never needs more than `n_seq_max` sequences.
    fn fit_batch(&mut self, n_seq_max: usize) {
        let b = self.chunking().fitted_batch(n_seq_max);
        self.set_batch(b);
    }
}

/// Does a raw line (prompt `prompt` decoded in chunk `chunk` as run `run`, `op` at `theta`) belong
/// to this plan and chunking?
pub(crate) fn check_in_plan<R>(
    plan: &[RunSpec<R>],
    chunking: &Chunking,
    (prompt, chunk, run): (usize, usize, usize),
    op: Op,
    theta: f32,
) -> Result<(), String> {
    let spec = plan.get(run).ok_or("run outside the plan")?;
    if prompt >= chunking.prompts
        || !chunking.chunk(chunk).contains(&prompt)
        || spec.op != op
        || spec.theta != theta
    {
        return Err(format!(
            "line for prompt {prompt} run {run} does not match the plan"
        ));
    }
    Ok(())
}

/// The model label: reports and run ids need a non-empty one.
pub(crate) fn check_model(model: &str) -> Result<(), LabError> {
    if model.trim().is_empty() {
        return Err(LabError::config("model", "\"\"", "a non-empty label"));
    }
    Ok(())
}

/// The lowest θ a grid admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThetaFloor {
    /// Any θ > 0 (θ < 1 rewards repetition).
    Positive,
    /// θ >= 1: a penalty (analyses that assume one).
    One,
}

/// A θ grid: at least one value, every value finite and above the floor, no value twice; with
/// `gate`, 1.0 must be among them (θ = 1 is the validity gate: no op may flip there).
pub(crate) fn check_thetas(thetas: &[f32], floor: ThetaFloor, gate: bool) -> Result<(), LabError> {
    let list = || {
        thetas
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if thetas.is_empty() {
        return Err(LabError::config("theta", "[]", "at least one θ"));
    }
    for (i, &t) in thetas.iter().enumerate() {
        let ok = t.is_finite()
            && match floor {
                ThetaFloor::Positive => t > 0.0,
                ThetaFloor::One => t >= 1.0,
            };
        if !ok {
            let range = match floor {
                ThetaFloor::Positive => "finite values > 0",
                ThetaFloor::One => "finite values >= 1 (a penalty; the analysis assumes θ ≥ 1)",
            };
            return Err(LabError::config("theta", t, range));
        }
        if thetas[..i].contains(&t) {
            return Err(LabError::config("theta", t, "distinct values"));
        }
    }
    if gate && !thetas.contains(&1.0) {
        return Err(LabError::config(
            "theta",
            list(),
            "a grid containing 1.0: θ = 1 is the validity gate (every op must flip 0 there)",
        ));
    }
    Ok(())
}

/// Operators: at least one, none twice.
pub(crate) fn check_ops(ops: &[Op]) -> Result<(), LabError> {
    if ops.is_empty() {
        return Err(LabError::config(
            "ops",
            "[]",
            "one or more of ctrl, normalized, subtractive",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if ops[..i].contains(op) {
            return Err(LabError::config("ops", op, "distinct operators"));
        }
    }
    Ok(())
}

/// α of the subtractive operator.
pub(crate) fn check_alpha(alpha: f32) -> Result<(), LabError> {
    if !(alpha.is_finite() && alpha >= 0.0) {
        return Err(LabError::config("alpha", alpha, "a finite value >= 0"));
    }
    Ok(())
}

/// A count that must lie in `1..=max` (`field` names it in the error).
pub(crate) fn check_count(field: &str, n: usize, max: usize) -> Result<(), LabError> {
    if n == 0 || n > max {
        let range = if max == usize::MAX {
            ">= 1".to_string()
        } else {
            format!("1..={max}")
        };
        return Err(LabError::config(field, n, &range));
    }
    Ok(())
}

/// Most tokens a run may generate.
pub(crate) const MAX_TOKENS: usize = 100_000;

/// The checks every externally decoded run makes on the prompts it is handed: an engine name
/// (`hf` or `vllm`) for `sampler`, one prompt per `unit` (`want` of them), and every prompt
/// non-empty with ids inside the vocabulary. `command` names where the other stacks run.
pub fn check_external_inputs(
    sampler: crate::stack::Stack,
    command: &str,
    prompts: &[Vec<gauge_sampling::TokenId>],
    want: usize,
    unit: &str,
    n_vocab: usize,
) -> Result<(), LabError> {
    if !sampler.is_python() {
        return Err(LabError::config(
            "sampler",
            sampler,
            &format!("a Python engine (gauge and llama-cpp run in `{command}`)"),
        ));
    }
    if prompts.len() != want {
        return Err(LabError::config(
            "prompts",
            prompts.len(),
            &format!("{want} prompts, one per {unit}"),
        ));
    }
    for (i, p) in prompts.iter().enumerate() {
        let err = |message: String| LabError::Tokenize { prefix: i, message };
        if p.is_empty() {
            return Err(err("no tokens".into()));
        }
        if let Some(&t) = p.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(err(format!("token {t} outside the vocabulary ({n_vocab})")));
        }
    }
    Ok(())
}

/// Chunk `k`'s items and its externally decoded runs in (item, run) order, from the caller's
/// list in any order. Refused, naming the field: `k` outside the grid's chunks or already
/// `written`; an item outside the chunk or a run outside `0..n_runs`; a run given twice or
/// missing. `what` names the items (`"prefix"`, `"schema"`), `key` gives a run's (item, run).
pub(crate) fn order_chunk_runs<R>(
    grid: &impl Grid,
    k: usize,
    written: bool,
    n_runs: usize,
    what: &str,
    runs: Vec<R>,
    key: impl Fn(&R) -> (usize, usize),
) -> Result<(std::ops::Range<usize>, Vec<R>), LabError> {
    let n_chunks = grid.n_chunks();
    if k >= n_chunks {
        return Err(LabError::config("chunk", k, &format!("0..{n_chunks}")));
    }
    if written {
        return Err(LabError::config("chunk", k, "a chunk not yet written"));
    }
    let items = grid.chunk(k);
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None)
        .take(items.len() * n_runs)
        .collect();
    for r in runs {
        let (item, run) = key(&r);
        if !items.contains(&item) || run >= n_runs {
            return Err(LabError::config(
                "runs",
                format!("{what} {item} run {run}"),
                &format!("{what} in {items:?} × run in 0..{n_runs}"),
            ));
        }
        let slot = &mut slots[(item - items.start) * n_runs + run];
        if slot.is_some() {
            return Err(LabError::config(
                "runs",
                format!("{what} {item} run {run} twice"),
                "each run once",
            ));
        }
        *slot = Some(r);
    }
    let ordered = slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            let (item, run) = (items.start + i / n_runs, i % n_runs);
            slot.ok_or_else(|| {
                LabError::config(
                    "runs",
                    format!("{what} {item} run {run} missing"),
                    "every run",
                )
            })
        })
        .collect::<Result<Vec<R>, LabError>>()?;
    Ok((items, ordered))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grid of 5 prompts in chunks of 2 (the last chunk holds one).
    struct Five;
    impl Grid for Five {
        fn chunking(&self) -> Chunking {
            Chunking {
                prompts: 5,
                batch: 2,
                runs_per_prompt: 3,
            }
        }
        fn set_batch(&mut self, _: usize) {}
    }

    #[test]
    fn chunk_runs_come_back_in_item_run_order_or_are_refused_by_field() {
        let order = |k, written, runs: Vec<(usize, usize)>| {
            order_chunk_runs(&Five, k, written, 3, "prefix", runs, |&r| r).map_err(|e| match e {
                LabError::Config { field, value, .. } => format!("{field}: {value}"),
                e => e.to_string(),
            })
        };
        let all = |items: std::ops::Range<usize>| -> Vec<(usize, usize)> {
            items.flat_map(|p| (0..3).map(move |r| (p, r))).collect()
        };
        let mut shuffled = all(2..4);
        shuffled.reverse();
        assert_eq!(order(1, false, shuffled), Ok((2..4, all(2..4))));
        assert_eq!(order(2, false, all(4..5)), Ok((4..5, all(4..5))));
        assert_eq!(order(3, false, vec![]).unwrap_err(), "chunk: 3");
        assert_eq!(
            order(usize::MAX, false, vec![]).unwrap_err(),
            format!("chunk: {}", usize::MAX)
        );
        assert_eq!(order(0, true, all(0..2)).unwrap_err(), "chunk: 0");
        let mut outside = all(0..2);
        outside[0] = (2, 0);
        assert_eq!(
            order(0, false, outside).unwrap_err(),
            "runs: prefix 2 run 0"
        );
        let mut bad_run = all(0..2);
        bad_run[1] = (0, 3);
        assert_eq!(
            order(0, false, bad_run).unwrap_err(),
            "runs: prefix 0 run 3"
        );
        let mut twice = all(0..2);
        twice[1] = (0, 0);
        assert_eq!(
            order(0, false, twice).unwrap_err(),
            "runs: prefix 0 run 0 twice"
        );
        assert_eq!(
            order(0, false, all(0..2)[1..].to_vec()).unwrap_err(),
            "runs: prefix 0 run 0 missing"
        );
    }

    #[test]
    fn chunks_cover_every_prompt_once_and_fit_the_sequence_limit() {
        let c = Chunking {
            prompts: 23,
            batch: 10,
            runs_per_prompt: 26,
        };
        assert_eq!(c.n_chunks(), 3);
        let all: Vec<usize> = (0..c.n_chunks()).flat_map(|k| c.chunk(k)).collect();
        assert_eq!(all, (0..23).collect::<Vec<_>>());
        assert_eq!(c.fitted_batch(256), 256 / 26);
        assert_eq!(c.fitted_batch(3), 1);
        assert_eq!(c.fitted_batch(10_000), 10);
    }

    #[test]
    fn theta_checks_name_the_field() {
        let field = |r: Result<(), LabError>| match r {
            Err(LabError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            field(check_thetas(&[], ThetaFloor::Positive, false)),
            "theta"
        );
        assert_eq!(
            field(check_thetas(&[1.3], ThetaFloor::Positive, true)),
            "theta"
        );
        assert_eq!(
            field(check_thetas(&[1.0, 0.9], ThetaFloor::One, true)),
            "theta"
        );
        assert_eq!(
            field(check_thetas(&[1.0, 1.0], ThetaFloor::One, true)),
            "theta"
        );
        assert_eq!(
            field(check_thetas(&[1.0, f32::NAN], ThetaFloor::Positive, true)),
            "theta"
        );
        check_thetas(&[1.0, 0.9], ThetaFloor::Positive, true).unwrap();
        assert_eq!(field(check_ops(&[Op::Ctrl, Op::Ctrl])), "ops");
        assert_eq!(field(check_count("tokens", 0, MAX_TOKENS)), "tokens");
        assert_eq!(field(check_alpha(-1.0)), "alpha");
    }
}
