//! The shared decode tree: every run of a prefix starts as ONE sequence; at each step each run
//! applies its own operator to the shared row and picks a token; runs are grouped by the token they
//! picked, and a group that splits forks its sequence (the source copies the KV cache). All live
//! sequences of all prefixes of a chunk are evaluated by one `step()`.
//!
//! Runs that produced the same tokens so far have the same history, hence the same row and the same
//! seen set, so sharing changes no decision: the unshared mode (one sequence per run, reference
//! operators on materialised rows) exists to prove that in tests.
//!
//! Work accounting: every evaluated token is charged to the run that owns the sequence (the first
//! run of its group), so per-run counts add up to the source's total and survive resumption.
//!
//! Decisions come from gauge's operators or, with [`Stack::LlamaCpp`] / [`Stack::Candle`], from
//! one engine chain per run ([`crate::stack`]): a chain holds its run's history, and since runs of
//! a group share their history, sharing changes nothing there either. What an experiment records beyond the
//! tokens (the probe's zero-point facts, delim's per-position facts) and when a run stops (json's
//! stop strings) is its [`Observer`]'s business: the tree knows neither.

use crate::error::LabError;
use crate::ops::{apply_row, argmax_first, Op, SeenSet, ShiftEval};
use crate::run::spec::RunSpec;
use crate::stack::{engine_chain, EngineChain, Stack};
use gauge_engine::{LogitSource, SeqId};
use gauge_grammar::GrammarState;
use gauge_sampling::TokenId;

/// What an experiment sees of the decode beyond the tokens: every decision with its row and seen
/// set, and the chance to stop a run. Every method defaults to doing nothing.
pub trait Observer {
    /// The next group's row is about to be decided: per-row caches are stale from here on.
    fn new_row(&mut self) {}
    /// Run `run` of job `job` picked `pick` on `row`, with the group's seen set before `pick`
    /// joins it.
    fn record(&mut self, _job: usize, _run: usize, _row: &[f32], _seen: &SeenSet, _pick: TokenId) {}
    /// Is the run finished, given its tokens so far (called after every token)?
    fn stop(&mut self, _job: usize, _run: usize, _tokens: &[TokenId]) -> bool {
        false
    }
    /// One step of every live sequence is done.
    fn stepped(&mut self) {}
}

/// An observer that records nothing and never stops a run early.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// One prompt to decode with a list of runs.
pub(crate) struct PrefixJob<'a, R> {
    pub prompt: &'a [TokenId],
    pub specs: &'a [RunSpec<R>],
    /// A grammar every run of this prompt is held to (`gauge json --constrained`): each run
    /// decides on the row with the grammar's forbidden tokens at `-inf`, before its operator, as
    /// the chain's `grammar` stage does. Runs that share a sequence share its grammar state.
    pub grammar: Option<GrammarState>,
}

impl<'a, R> PrefixJob<'a, R> {
    /// One job per prompt of `range`, all with the same plan.
    pub fn same_plan(
        prompts: &'a [Vec<TokenId>],
        range: std::ops::Range<usize>,
        plan: &'a [RunSpec<R>],
    ) -> Vec<Self> {
        prompts[range]
            .iter()
            .map(|p| PrefixJob {
                prompt: p,
                specs: plan,
                grammar: None,
            })
            .collect()
    }
}

/// What one run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunResult {
    pub tokens: Vec<TokenId>,
    pub forward_tokens: u64,
}

/// How to decode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeOptions {
    pub tokens: usize,
    pub window: Option<usize>,
    /// Share sequences between runs that agree (the fast path) or give every run its own.
    pub sharing: bool,
    /// Use the reference operators on materialised rows instead of the O(|S|) fast path.
    pub naive_ops: bool,
    /// Who decides: gauge's operators or an engine's chain.
    pub stack: Stack,
    /// The prompt is part of the seen set (`false`: generated tokens only, as candle's example
    /// and llama-cpp-python penalize).
    pub seen_prompt: bool,
}

struct Group {
    seq: SeqId,
    runs: Vec<usize>,
    seen: SeenSet,
    /// The grammar state of the group's text (constrained runs only).
    grammar: Option<GrammarState>,
    /// The sequence was freed because every run of the group finished.
    freed: bool,
}

struct PrefixState {
    groups: Vec<Group>,
    results: Vec<RunResult>,
    /// One engine chain per run (llama-cpp and candle stacks only).
    chains: Vec<Option<EngineChain>>,
}

/// Reused buffers: a step allocates nothing unless a group splits.
#[derive(Default)]
struct Scratch {
    picks: Vec<TokenId>,
    stopped: Vec<bool>,
    evals: Vec<ShiftEval>,
    row: Vec<f32>,
    /// The row with the grammar's forbidden tokens at `-inf`.
    masked: Vec<f32>,
}

/// Decode all `jobs` together for at most `opts.tokens` steps (a run ends early when `obs` says
/// so), telling `obs` every decision.
pub(crate) fn decode_chunk<R>(
    source: &mut dyn LogitSource,
    jobs: &[PrefixJob<'_, R>],
    opts: DecodeOptions,
    obs: &mut dyn Observer,
) -> Result<Vec<Vec<RunResult>>, LabError> {
    let mut states: Vec<PrefixState> = Vec::with_capacity(jobs.len());
    let out = decode_inner(source, jobs, opts, obs, &mut states);
    // Free every live sequence on success and on error alike, so a failed chunk leaks nothing.
    let mut free_err = None;
    for st in &states {
        for g in st.groups.iter().filter(|g| !g.freed) {
            if let Err(e) = source.free(g.seq) {
                free_err.get_or_insert(e);
            }
        }
    }
    out?;
    if let Some(e) = free_err {
        return Err(e.into());
    }
    Ok(states.into_iter().map(|s| s.results).collect())
}

fn decode_inner<R>(
    source: &mut dyn LogitSource,
    jobs: &[PrefixJob<'_, R>],
    opts: DecodeOptions,
    obs: &mut dyn Observer,
    states: &mut Vec<PrefixState>,
) -> Result<(), LabError> {
    let n_vocab = source.n_vocab();
    // Prefill: one sequence per prefix (or per run when unshared), all in one batch.
    for job in jobs {
        let st = PrefixState {
            groups: Vec::new(),
            results: job
                .specs
                .iter()
                .map(|_| RunResult {
                    tokens: Vec::with_capacity(opts.tokens),
                    forward_tokens: 0,
                })
                .collect(),
            chains: Vec::new(),
        };
        let mut seen = SeenSet::new(n_vocab, opts.window);
        if opts.seen_prompt {
            for &t in job.prompt {
                seen.accept(t);
            }
        }
        let partition: Vec<Vec<usize>> = if opts.sharing {
            vec![(0..job.specs.len()).collect()]
        } else {
            (0..job.specs.len()).map(|r| vec![r]).collect()
        };
        // Registered in `states` before any sequence exists, so every sequence is freed even if a
        // later allocation or push fails.
        let idx = states.len();
        states.push(st);
        let st = &mut states[idx];
        if opts.stack.has_chain() {
            // llama.cpp's "no window" is a window as long as the context: its ring buffer then
            // never drops a token.
            for spec in job.specs {
                let mut chain =
                    engine_chain(opts.stack, spec, n_vocab, opts.window, source.n_ctx())?;
                if let Some(c) = chain.as_mut().filter(|_| opts.seen_prompt) {
                    c.accept_prompt(job.prompt);
                }
                st.chains.push(chain);
            }
        }
        for runs in partition {
            let seq = source.new_sequence()?;
            let owner = runs[0];
            st.groups.push(Group {
                seq,
                runs,
                seen: seen.clone(),
                grammar: job.grammar.clone(),
                freed: false,
            });
            source.push(seq, job.prompt)?;
            st.results[owner].forward_tokens += job.prompt.len() as u64;
        }
    }
    source.step()?;

    let mut sc = Scratch::default();
    for t in 0..opts.tokens {
        let last = t + 1 == opts.tokens;
        let mut live = false;
        for (ji, (job, st)) in jobs.iter().zip(states.iter_mut()).enumerate() {
            let n_groups = st.groups.len();
            for gi in 0..n_groups {
                if st.groups[gi].freed {
                    continue;
                }
                decide(
                    source,
                    job.specs,
                    &mut st.groups[gi],
                    &mut st.chains,
                    opts,
                    &mut sc,
                )?;
                obs.new_row();
                let g = &st.groups[gi];
                let row = source.logits(g.seq)?;
                for (&r, &pick) in g.runs.iter().zip(&sc.picks) {
                    obs.record(ji, r, row, &g.seen, pick);
                }
                sc.stopped.clear();
                for (k, &r) in st.groups[gi].runs.iter().enumerate() {
                    st.results[r].tokens.push(sc.picks[k]);
                    sc.stopped.push(obs.stop(ji, r, &st.results[r].tokens));
                }
                if sc.stopped.iter().any(|&d| d) {
                    // Finished runs leave the group; an empty group frees its sequence.
                    let g = &mut st.groups[gi];
                    let keep: Vec<usize> = (0..g.runs.len()).filter(|&k| !sc.stopped[k]).collect();
                    g.runs = keep.iter().map(|&k| g.runs[k]).collect();
                    let picks: Vec<TokenId> = keep.iter().map(|&k| sc.picks[k]).collect();
                    sc.picks.clear();
                    sc.picks.extend(picks);
                    if g.runs.is_empty() {
                        g.freed = true;
                        source.free(g.seq)?;
                        continue;
                    }
                }
                if !last {
                    advance(source, st, gi, &sc.picks)?;
                    live = true;
                }
            }
        }
        if live {
            source.step()?;
        }
        obs.stepped();
        if !live {
            break;
        }
    }
    Ok(())
}

/// Fill `sc.picks` with each run's greedy token on the group's current row.
fn decide<R>(
    source: &dyn LogitSource,
    specs: &[RunSpec<R>],
    g: &mut Group,
    chains: &mut [Option<EngineChain>],
    opts: DecodeOptions,
    sc: &mut Scratch,
) -> Result<(), LabError> {
    let row = source.logits(g.seq)?;
    let n = source.n_vocab();
    if row.len() != n || n == 0 {
        return Err(gauge_engine::SourceError::Backend(format!(
            "logit row of {} entries, n_vocab = {n}",
            row.len()
        ))
        .into());
    }
    sc.picks.clear();
    sc.evals.clear();
    if let Some(grammar) = g.grammar.as_mut() {
        // Constrained: every run decides on the masked row with the reference operators.
        grammar.mask_row(row, &mut sc.masked);
        for &r in &g.runs {
            let spec = &specs[r];
            apply_row(
                &sc.masked,
                spec.c,
                &spec.penalty(),
                g.seen.members(),
                &mut sc.row,
            );
            sc.picks.push(argmax_first(&sc.row).unwrap_or(0) as TokenId);
        }
        return Ok(());
    }
    for &r in &g.runs {
        let spec = &specs[r];
        let pen = spec.penalty();
        let naive = opts.naive_ops || !is_fast(spec.op);
        let pick = if let Some(chain) = chains.get_mut(r).and_then(Option::as_mut) {
            // The engine decides; its chain records the token (llama.cpp: as
            // `llama_sampler_accept` would).
            let t = chain.sample_no_accept(row)?;
            chain.accept(t);
            Some(t as usize)
        } else if naive {
            apply_row(row, spec.c, &pen, g.seen.members(), &mut sc.row);
            argmax_first(&sc.row)
        } else {
            let bits = spec.c.to_bits();
            let idx = match sc.evals.iter().position(|e| e.c.to_bits() == bits) {
                Some(i) => i,
                None => {
                    let with_norm = g
                        .runs
                        .iter()
                        .any(|&q| specs[q].op == Op::Normalized && specs[q].c.to_bits() == bits);
                    sc.evals
                        .push(ShiftEval::new(row, spec.c, &g.seen, with_norm));
                    sc.evals.len() - 1
                }
            };
            sc.evals[idx].pick(row, &pen, &g.seen)
        };
        // A row of n >= 1 entries always has a maximum.
        sc.picks.push(pick.unwrap_or(0) as TokenId);
    }
    Ok(())
}

/// Ops with an O(|S|) fast path; anything else is decided on a materialised row.
fn is_fast(op: Op) -> bool {
    matches!(op, Op::Ctrl | Op::Normalized | Op::Subtractive)
}

/// Append the picked tokens: one push if the group agrees, else fork per distinct token.
fn advance(
    source: &mut dyn LogitSource,
    st: &mut PrefixState,
    gi: usize,
    picks: &[TokenId],
) -> Result<(), LabError> {
    let first = picks[0];
    if picks.iter().all(|&p| p == first) {
        let g = &mut st.groups[gi];
        source.push(g.seq, &[first])?;
        g.seen.accept(first);
        if let Some(gr) = g.grammar.as_mut() {
            // The pick came from the masked row, so the grammar accepts it.
            let _ = gr.consume(first as u32);
        }
        st.results[g.runs[0]].forward_tokens += 1;
        return Ok(());
    }
    // Split: runs keep their relative order; the group of the first run keeps the sequence.
    let mut tokens: Vec<TokenId> = Vec::new();
    for &p in picks {
        if !tokens.contains(&p) {
            tokens.push(p);
        }
    }
    let runs = std::mem::take(&mut st.groups[gi].runs);
    let parent = st.groups[gi].seq;
    for &tok in &tokens[1..] {
        let sub: Vec<usize> = runs
            .iter()
            .zip(picks)
            .filter(|(_, &p)| p == tok)
            .map(|(&r, _)| r)
            .collect();
        let child = source.fork(parent)?;
        let mut seen = st.groups[gi].seen.clone();
        seen.accept(tok);
        let mut grammar = st.groups[gi].grammar.clone();
        if let Some(gr) = grammar.as_mut() {
            let _ = gr.consume(tok as u32);
        }
        st.results[sub[0]].forward_tokens += 1;
        st.groups.push(Group {
            seq: child,
            runs: sub,
            seen,
            grammar,
            freed: false,
        });
        source.push(child, &[tok])?;
    }
    let g = &mut st.groups[gi];
    g.runs = runs
        .iter()
        .zip(picks)
        .filter(|(_, &p)| p == first)
        .map(|(&r, _)| r)
        .collect();
    source.push(parent, &[first])?;
    g.seen.accept(first);
    if let Some(gr) = g.grammar.as_mut() {
        let _ = gr.consume(first as u32);
    }
    st.results[g.runs[0]].forward_tokens += 1;
    Ok(())
}
