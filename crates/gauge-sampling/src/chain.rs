//! `Chain`: ordered stages, the sample loop, llama.cpp's chain print, and the chain builder.
//!
//! [`Chain::from_params`] builds exactly the chain llama.cpp's `common_sampler_init` builds
//! (docs/SPEC.md §3): `logit-bias` first when there is any bias, then one stage per entry of `samplers` in
//! that order (the `temperature` slot is `temp-ext`), then the terminal `dist`, or `adaptive-p` when
//! `adaptive_p` appears anywhere in the list. With `mirostat` 1 or 2 the list is ignored and the
//! chain is `[logit-bias] -> temp -> mirostat[-v2]`. Disabled stages stay in the chain as llama.cpp's
//! stateless `?name` placeholders, so [`Chain::describe`] prints what llama.cpp prints.
//!
//! [`ChainBuilder`] is the same construction behind `with_*` methods. The builder only sets
//! parameters; the order always comes from the `samplers` list, so the order of the calls never
//! matters. [`ChainBuilder::greedy`] ends the chain with `greedy` instead of `dist` and leaves out
//! disabled stages, so the bare greedy chain is `logits -> greedy`, as `llama_sampler_init_greedy`.
//!
//! Strings (string logit-bias keys, DRY's string breakers, string penalty exemptions, `ignore_eos`)
//! need a [`Vocab`]; without one they are [`SamplingError::NeedsVocab`], but only when the stage
//! that would use them is enabled: a disabled DRY never needs its breakers.

use crate::candidates::{Candidates, TokenId};
use crate::error::{Result, SamplingError};
use crate::order::SamplerType;
use crate::overlay::Overlay;
use crate::params::{LogitBias, SamplingParams, TokenRef, DEFAULT_DRY_BREAKERS};
use crate::sampler::FromRow;
use crate::sampler::{Sampler, Shift};
use crate::samplers::dry::{self, DryConfig};
use crate::samplers::penalties::{self, PenaltiesConfig, PenaltyMode, Window};
use crate::samplers::{
    adaptive_p, dist, greedy, logit_bias, min_p, mirostat, mirostat_v2, temp, temp_ext, top_k,
    top_n_sigma, top_p, typical, xtc,
};
use crate::vocab::Vocab;

/// An ordered list of stages applied to one candidate array, ending in a terminal sampler.
#[derive(Clone, Debug)]
pub struct Chain {
    stages: Vec<Box<dyn Sampler>>,
    n_vocab: usize,
    cur: Candidates,
    overlay: Overlay,
    fast: bool,
}

crate::simd::multiversion! {
/// One pass over a logit row: (a NaN or `+inf` anywhere, some value above `-inf`).
/// A row is valid when the first is false and the second true ([`Chain::validate_row`]); a
/// stage that reads the row straight (`Sampler::apply_from_row`) uses it to answer
/// `FromRow::Invalid`, and the chain then reports the exact entry. Dispatched
/// ([`crate::simd`]): the span-max kernel top-k reads the row with, whose maximum never takes a
/// NaN, so some value is above `-inf` exactly when the maximum is (a loop of two flags per lane
/// kept the CPU's mask registers busy, at a third of the speed of a read).
pub fn row_flags<I>(logits: &[f32]) -> (bool, bool) {
    let mut bad = false;
    let max = I::span_max(logits, &mut bad);
    (bad, max > f32::NEG_INFINITY)
}
}

/// Fast-path counters (`testing` feature): how the steps of this thread's chains went, so a test
/// that compares the fast path with the fill path can prove the fast path actually ran.
#[cfg(feature = "testing")]
pub mod testing {
    use std::cell::Cell;

    /// Steps counted since the thread started (subtract two readings for a span).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct FastPathCounts {
        /// Fast-path steps whose first dense stage built the array straight from the row.
        pub from_row: u64,
        /// Fast-path steps that fell back to the fill (no such stage, or it declined).
        pub declined: u64,
        /// Steps of chains with the fast path switched off.
        pub fill: u64,
        /// `from_row` steps whose stage read an allowed set recorded in the overlay (a grammar's,
        /// `Overlay::keep_only`) instead of a filled array of the allowed entries.
        pub kept_from_row: u64,
        /// mirostat-v2 steps that drew from a kept set too large for the sorted prefix without
        /// sorting it (`kernels::wide_draw`); also counted in `from_row`.
        pub wide_draws: u64,
    }

    impl std::ops::Add for FastPathCounts {
        type Output = FastPathCounts;
        fn add(self, o: FastPathCounts) -> FastPathCounts {
            FastPathCounts {
                from_row: self.from_row + o.from_row,
                declined: self.declined + o.declined,
                fill: self.fill + o.fill,
                wide_draws: self.wide_draws + o.wide_draws,
                kept_from_row: self.kept_from_row + o.kept_from_row,
            }
        }
    }

    impl std::ops::Sub for FastPathCounts {
        type Output = FastPathCounts;
        fn sub(self, o: FastPathCounts) -> FastPathCounts {
            FastPathCounts {
                from_row: self.from_row - o.from_row,
                declined: self.declined - o.declined,
                fill: self.fill - o.fill,
                wide_draws: self.wide_draws - o.wide_draws,
                kept_from_row: self.kept_from_row - o.kept_from_row,
            }
        }
    }

    thread_local! {
        static COUNTS: Cell<FastPathCounts> = const {
            Cell::new(FastPathCounts {
                from_row: 0, declined: 0, fill: 0, wide_draws: 0, kept_from_row: 0,
            })
        };
    }

    /// This thread's counts so far.
    pub fn counts() -> FastPathCounts {
        COUNTS.with(|c| c.get())
    }

    pub(crate) fn count(f: impl FnOnce(&mut FastPathCounts)) {
        COUNTS.with(|c| {
            let mut v = c.get();
            f(&mut v);
            c.set(v);
        });
    }
}

impl Chain {
    /// A chain over `stages` (in order) for a vocabulary of `n_vocab` logits.
    pub fn from_stages(n_vocab: usize, stages: Vec<Box<dyn Sampler>>) -> Self {
        Self {
            stages,
            n_vocab,
            cur: Candidates::new(),
            overlay: Overlay::default(),
            fast: true,
        }
    }

    /// Turn the row fast path on (default) or off. Off, every step fills the full candidate array
    /// first, exactly as llama.cpp does; on, sparse stages and the first dense stage read the row
    /// directly. Both give the same token; only `last_candidates` differs (the fast path keeps only
    /// what the chain needed, e.g. the chosen token alone after greedy).
    pub fn with_fast_path(mut self, on: bool) -> Self {
        self.fast = on;
        self
    }

    /// The vocabulary size this chain expects.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The stages, in order.
    pub fn stages(&self) -> &[Box<dyn Sampler>] {
        &self.stages
    }

    /// The stages, mutably: [`crate::explain`] applies them one at a time.
    pub(crate) fn stages_mut(&mut self) -> &mut [Box<dyn Sampler>] {
        &mut self.stages
    }

    /// llama.cpp's chain print: `"logits "` then `"-> name "` per stage (note the trailing space).
    pub fn describe(&self) -> String {
        let mut s = String::from("logits ");
        for st in &self.stages {
            s.push_str("-> ");
            s.push_str(st.name());
            s.push(' ');
        }
        s
    }

    /// Per-stage shift behaviour, in chain order.
    pub fn shift_report(&self) -> Vec<(String, Shift)> {
        self.stages
            .iter()
            .map(|s| (s.name().to_string(), s.shift()))
            .collect()
    }

    /// Check a logit row: right length, no NaN, no +inf, at least one finite value.
    pub fn validate_row(&self, logits: &[f32]) -> Result<()> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::RowLength {
                expected: self.n_vocab,
                got: logits.len(),
            });
        }
        if logits.is_empty() {
            return Err(SamplingError::Empty("the vocabulary is empty".into()));
        }
        // One vectorisable pass; the exact index is searched only on failure.
        let (bad, any_finite) = row_flags(logits);
        if bad {
            let (i, &x) = logits
                .iter()
                .enumerate()
                .find(|(_, x)| x.is_nan() || **x == f32::INFINITY)
                .expect("a bad value was seen");
            return Err(SamplingError::NonFiniteLogit { index: i, value: x });
        }
        if !any_finite {
            return Err(SamplingError::NoFiniteLogit);
        }
        Ok(())
    }

    /// Apply every stage to `cur` in order (llama.cpp `llama_sampler_apply` on a chain).
    pub fn apply(&mut self, cur: &mut Candidates) {
        for st in self.stages.iter_mut() {
            st.apply(cur);
        }
    }

    /// Sample one token from a logit row and accept it: the work of `llama_sampler_sample`.
    pub fn sample(&mut self, logits: &[f32]) -> Result<TokenId> {
        let tok = self.sample_no_accept(logits)?;
        self.accept(tok);
        Ok(tok)
    }

    /// Run the chain on a logit row and return the selected token without accepting it.
    pub fn sample_no_accept(&mut self, logits: &[f32]) -> Result<TokenId> {
        let mut cur = std::mem::take(&mut self.cur);
        let res = if self.fast {
            self.apply_fast(logits, &mut cur)
        } else {
            #[cfg(feature = "testing")]
            testing::count(|c| c.fill += 1);
            self.validate_row(logits).map(|()| {
                cur.fill(logits);
                self.apply(&mut cur);
            })
        };
        let chosen = cur.selected.and_then(|i| cur.as_slice().get(i)).copied();
        self.cur = cur;
        res?;
        match chosen {
            // Only possible when the stages masked every candidate (e.g. a logit-bias banning every
            // finite token): llama.cpp's dist then returns a banned token with NaN p, gauge refuses.
            Some(t) if t.logit == f32::NEG_INFINITY => Err(SamplingError::NoFiniteLogit),
            Some(t) => Ok(t.id),
            None => Err(SamplingError::Empty("no candidate was selected (the chain has no terminal sampler, or every candidate was removed)".into())),
        }
    }

    /// Sparse stages on the raw row, then the first dense stage straight from the row when it can,
    /// else llama.cpp's fill; the rest of the stages run on the (now small) array as usual.
    ///
    /// Stage state is only touched once the row is known to be valid: sparse stages read just the
    /// (validated) history ids, and the first dense stage validates the row in its own pass.
    fn apply_fast(&mut self, logits: &[f32], cur: &mut Candidates) -> Result<()> {
        if logits.len() != self.n_vocab || logits.is_empty() {
            return self.validate_row(logits);
        }
        self.overlay.reset(logits.len());
        let mut i = 0;
        while i < self.stages.len() && self.stages[i].apply_sparse(logits, &mut self.overlay) {
            i += 1;
        }
        self.overlay.prepare();
        let from_row = match self.stages.get_mut(i) {
            Some(st) if self.overlay.keep_mask().is_none() || st.reads_keep_mask() => {
                st.apply_from_row(logits, &self.overlay, cur)
            }
            _ => FromRow::Declined,
        };
        #[cfg(feature = "testing")]
        {
            let kept = self.overlay.keep_mask().is_some() as u64;
            testing::count(|c| match from_row {
                FromRow::Done => {
                    c.from_row += 1;
                    c.kept_from_row += kept;
                }
                _ => c.declined += 1,
            });
        }
        match from_row {
            FromRow::Done => i += 1,
            // Invalid: the row check below reports the exact entry. Should a stage ever call a
            // valid row invalid, the chain falls back to the fill path rather than return the
            // previous step's selection.
            FromRow::Invalid | FromRow::Declined => {
                self.validate_row(logits)?;
                self.overlay.materialize(logits, cur);
            }
        }
        for st in self.stages[i..].iter_mut() {
            st.apply(cur);
        }
        Ok(())
    }

    /// The candidate array left by the last `sample` (for inspection: ids, p, order).
    pub fn last_candidates(&self) -> &Candidates {
        &self.cur
    }

    /// Accept a generated token into every stage.
    ///
    /// This cannot fail, as in llama.cpp: an id outside `0..n_vocab` is recorded like any other
    /// (it takes a place in the penalty and DRY windows) but matches no candidate, so it penalises
    /// nothing. Check ids first where that matters (trace replay does).
    pub fn accept(&mut self, token: TokenId) {
        for st in self.stages.iter_mut() {
            st.accept(token);
        }
    }

    /// Accept a prompt token into every stage (out-of-range ids: as [`Chain::accept`]).
    pub fn accept_prompt(&mut self, token: TokenId) {
        for st in self.stages.iter_mut() {
            st.accept_prompt(token);
        }
    }

    /// Reset every stage (history, RNG).
    pub fn reset(&mut self) {
        for st in self.stages.iter_mut() {
            st.reset();
        }
    }
}

// -------------------------------------------------------------------------------------------------
// Construction from parameters

/// The sampler that ends a chain built from parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Terminal {
    /// llama.cpp's `dist` (or `adaptive-p` when the `samplers` list asks for it).
    #[default]
    Dist,
    /// `greedy`: the first maximal logit; disabled stages are left out of the chain.
    Greedy,
}

/// mirostat v1's `m` (the number of tokens used to estimate `s_hat`), fixed by common.
const MIROSTAT_M: i32 = 100;

impl Chain {
    /// Build llama.cpp's chain for `params` (validated first) over `n_vocab` logits.
    ///
    /// `vocab` resolves strings (logit-bias keys, DRY string breakers, penalty exemptions,
    /// `ignore_eos`); it must have the same `n_vocab`.
    pub fn from_params(
        params: &SamplingParams,
        n_vocab: usize,
        vocab: Option<&dyn Vocab>,
    ) -> Result<Chain> {
        build_chain(params, Terminal::Dist, n_vocab, vocab)
    }
}

fn needs_vocab(field: &str, value: &str) -> SamplingError {
    SamplingError::NeedsVocab {
        field: field.to_string(),
        value: value.to_string(),
    }
}

/// Every token of `text` (tokenized without special tokens), checked against `n_vocab`.
fn tokens_of(
    field: &str,
    text: &str,
    n_vocab: usize,
    vocab: Option<&dyn Vocab>,
) -> Result<Vec<TokenId>> {
    let vocab = vocab.ok_or_else(|| needs_vocab(field, text))?;
    let toks = vocab.tokenize(text);
    if toks.is_empty() && field == "logit_bias" {
        // Dropping the entry would silently ignore the bias the client asked for. (An exemption
        // of text with no tokens exempts nothing, which is what it says.)
        return Err(SamplingError::param(
            field,
            format!("{text:?}"),
            "text that tokenizes to at least one token",
        ));
    }
    check_ids(field, &toks, n_vocab)?;
    Ok(toks)
}

fn check_ids(field: &str, ids: &[TokenId], n_vocab: usize) -> Result<()> {
    match ids.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
        Some(&t) => Err(SamplingError::TokenOutOfRange {
            field: field.to_string(),
            token: t as i64,
            n_vocab,
        }),
        None => Ok(()),
    }
}

/// User biases (string keys become every token of their tokenization), then `-inf` for every
/// end-of-generation token when `ignore_eos` is set: llama-server's order.
fn resolve_biases(
    p: &SamplingParams,
    n_vocab: usize,
    vocab: Option<&dyn Vocab>,
) -> Result<Vec<(TokenId, f32)>> {
    let mut out = Vec::with_capacity(p.logit_bias.len());
    for LogitBias { token, bias } in &p.logit_bias {
        match token {
            TokenRef::Id(id) => out.push((*id, *bias)),
            TokenRef::Text(text) => out.extend(
                tokens_of("logit_bias", text, n_vocab, vocab)?
                    .into_iter()
                    .map(|t| (t, *bias)),
            ),
        }
    }
    if p.ignore_eos {
        let vocab = vocab.ok_or_else(|| needs_vocab("ignore_eos", "true"))?;
        let eog = vocab.eog_tokens();
        check_ids("ignore_eos", &eog, n_vocab)?;
        out.extend(eog.into_iter().map(|t| (t, f32::NEG_INFINITY)));
    }
    Ok(out)
}

fn penalties_config(
    p: &SamplingParams,
    n_vocab: usize,
    vocab: Option<&dyn Vocab>,
) -> Result<PenaltiesConfig> {
    let last_n = Window::from_i32(p.repeat_last_n);
    let off = p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0;
    let enabled = !last_n.is_disabled() && !off;
    let mut exempt = Vec::new();
    // A disabled stage never reads its exemptions, so strings there need no vocabulary.
    if enabled {
        for t in &p.penalty_exempt {
            match t {
                TokenRef::Id(id) => exempt.push(*id),
                TokenRef::Text(text) => {
                    exempt.extend(tokens_of("penalty_exempt", text, n_vocab, vocab)?)
                }
            }
        }
    }
    Ok(PenaltiesConfig {
        n_vocab,
        last_n,
        repeat: p.repeat_penalty,
        freq: p.frequency_penalty,
        present: p.presence_penalty,
        mode: p.repeat_penalty_mode,
        count_prompt: p.penalize_prompt,
        once_per_token: p.penalty_once_per_token,
        exempt,
    })
}

fn dry_config(p: &SamplingParams, n_vocab: usize, vocab: Option<&dyn Vocab>) -> Result<DryConfig> {
    let last_n = Window::from_i32(p.dry_penalty_last_n);
    let enabled = p.dry_multiplier != 0.0 && p.dry_base >= 1.0 && !last_n.is_disabled();
    let mut breakers = p.dry_sequence_breaker_ids.clone().unwrap_or_default();
    // Token-id breakers replace llama.cpp's default strings; explicit strings are added to them.
    let strings: Vec<String> = match (&p.dry_sequence_breakers, &p.dry_sequence_breaker_ids) {
        (Some(s), _) => s.clone(),
        (None, None) => DEFAULT_DRY_BREAKERS.iter().map(|s| s.to_string()).collect(),
        (None, Some(_)) => Vec::new(),
    };
    if enabled && !strings.is_empty() {
        let vocab =
            vocab.ok_or_else(|| needs_vocab("dry_sequence_breakers", &format!("{strings:?}")))?;
        let expanded = dry::expand_string_breakers(vocab, &strings);
        for b in &expanded {
            check_ids("dry_sequence_breakers", b, n_vocab)?;
        }
        breakers.extend(expanded);
    }
    Ok(DryConfig {
        multiplier: p.dry_multiplier,
        base: p.dry_base,
        allowed_length: p.dry_allowed_length,
        penalty_last_n: last_n,
        breakers,
    })
}

fn build_chain(
    p: &SamplingParams,
    terminal: Terminal,
    n_vocab: usize,
    vocab: Option<&dyn Vocab>,
) -> Result<Chain> {
    // Refused here rather than at the first `sample`: an empty vocabulary could never sample, and
    // ids beyond i32 would wrap in the candidate array.
    if n_vocab == 0 || n_vocab > TokenId::MAX as usize {
        return Err(SamplingError::param(
            "n_vocab",
            n_vocab,
            "1..=2147483647 (a non-empty vocabulary of 32-bit token ids)",
        ));
    }
    p.validate(n_vocab)?;
    if let Some(v) = vocab {
        if v.n_vocab() != n_vocab {
            return Err(SamplingError::param(
                "n_vocab",
                n_vocab,
                &format!(
                    "the vocabulary's size ({}) when a vocabulary is given",
                    v.n_vocab()
                ),
            ));
        }
    }
    let mut stages: Vec<Box<dyn Sampler>> = Vec::with_capacity(p.samplers.len() + 2);
    let biases = resolve_biases(p, n_vocab, vocab)?;
    if !biases.is_empty() {
        stages.push(logit_bias::build(n_vocab, biases));
    }

    if p.mirostat != 0 {
        if terminal == Terminal::Greedy {
            return Err(SamplingError::param(
                "mirostat",
                p.mirostat,
                "0 in a greedy chain (mirostat is its own terminal)",
            ));
        }
        // common: plain `temp` (not temp-ext), then mirostat; every other slot is dropped.
        stages.push(temp::build(p.temperature));
        stages.push(match p.mirostat {
            1 => mirostat::build(n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, MIROSTAT_M),
            _ => mirostat_v2::build(p.seed, p.mirostat_tau, p.mirostat_eta),
        });
        return Ok(Chain::from_stages(n_vocab, stages));
    }

    let min_keep = p.min_keep as usize; // validated >= 0
    let mut adaptive = false;
    for &slot in &p.samplers {
        let stage = match slot {
            SamplerType::Penalties => penalties::build(penalties_config(p, n_vocab, vocab)?),
            SamplerType::Dry => dry::build(dry_config(p, n_vocab, vocab)?),
            SamplerType::TopNSigma => top_n_sigma::build(p.top_n_sigma),
            SamplerType::TopK => top_k::build(p.top_k),
            SamplerType::TypicalP => typical::build(p.typical_p, min_keep),
            SamplerType::TopP => top_p::build(p.top_p, min_keep),
            SamplerType::MinP => min_p::build(p.min_p, min_keep),
            SamplerType::Xtc => xtc::build(p.xtc_probability, p.xtc_threshold, min_keep, p.seed),
            SamplerType::Temperature => {
                temp_ext::build(p.temperature, p.dynatemp_range, p.dynatemp_exponent)
            }
            SamplerType::Infill => {
                return Err(SamplingError::param(
                    "samplers",
                    "\"infill\"",
                    "the other sampler names (gauge has no infill stage)",
                ))
            }
            SamplerType::AdaptiveP => {
                // llama.cpp only records the wish; adaptive-p replaces dist at the end.
                adaptive = true;
                continue;
            }
        };
        if terminal == Terminal::Greedy && stage.name().starts_with('?') {
            // Placeholders are stateless no-ops: leaving them out changes no number.
            continue;
        }
        stages.push(stage);
    }
    match terminal {
        Terminal::Greedy if adaptive => {
            return Err(SamplingError::param(
                "samplers",
                "adaptive_p",
                "no adaptive_p in a greedy chain (both are terminal)",
            ))
        }
        Terminal::Greedy => stages.push(greedy::build()),
        Terminal::Dist if adaptive => stages.push(adaptive_p::build(
            p.adaptive_target,
            p.adaptive_decay,
            p.seed,
        )),
        Terminal::Dist => stages.push(dist::build(p.seed)),
    }
    Ok(Chain::from_stages(n_vocab, stages))
}

// -------------------------------------------------------------------------------------------------
// Builder

/// Build a chain from `with_*` calls. The calls set parameters only; the stage order is always
/// llama.cpp's (or the one given by [`ChainBuilder::with_samplers`]), whatever order the calls come in.
///
/// ```
/// use gauge_sampling::chain::ChainBuilder;
/// let a = ChainBuilder::new(1000).with_top_k(20).with_penalties(64, 1.1, 0.0, 0.0).build().unwrap();
/// let b = ChainBuilder::new(1000).with_penalties(64, 1.1, 0.0, 0.0).with_top_k(20).build().unwrap();
/// assert_eq!(a.describe(), b.describe());
/// assert!(a.describe().starts_with("logits -> penalties -> ?dry -> ?top-n-sigma -> top-k"));
/// ```
#[derive(Clone)]
pub struct ChainBuilder<'v> {
    params: SamplingParams,
    terminal: Terminal,
    n_vocab: usize,
    vocab: Option<&'v dyn Vocab>,
}

impl std::fmt::Debug for ChainBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainBuilder")
            .field("params", &self.params)
            .field("terminal", &self.terminal)
            .field("n_vocab", &self.n_vocab)
            .field("vocab", &self.vocab.map(|_| "<vocab>"))
            .finish()
    }
}

impl<'v> ChainBuilder<'v> {
    /// llama.cpp's default chain for `n_vocab` logits.
    pub fn new(n_vocab: usize) -> Self {
        Self::from_params(SamplingParams::default(), n_vocab)
    }

    /// Start from a full parameter set (a request, a preset).
    pub fn from_params(params: SamplingParams, n_vocab: usize) -> Self {
        Self {
            params,
            terminal: Terminal::Dist,
            n_vocab,
            vocab: None,
        }
    }

    /// A greedy chain: every stage off and `greedy` at the end, so it builds `logits -> greedy`
    /// until a `with_*` call turns a stage on (it then runs in llama.cpp's slot before `greedy`).
    pub fn greedy(n_vocab: usize) -> Self {
        let params = SamplingParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.0,
            ..SamplingParams::default()
        };
        Self {
            params,
            terminal: Terminal::Greedy,
            n_vocab,
            vocab: None,
        }
    }

    /// Resolve strings (logit-bias keys, DRY breakers, exemptions, `ignore_eos`) through `vocab`.
    pub fn with_vocab(mut self, vocab: &'v dyn Vocab) -> Self {
        self.vocab = Some(vocab);
        self
    }

    /// The parameters as set so far.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The slot order (llama.cpp's default unless changed).
    pub fn with_samplers(mut self, order: Vec<SamplerType>) -> Self {
        self.params.samplers = order;
        self
    }

    /// The seed of every random stage (`0xFFFFFFFF` = a random seed).
    pub fn with_seed(mut self, seed: u32) -> Self {
        self.params.seed = seed;
        self
    }

    /// Temperature (`0` = argmax, `1` = off).
    pub fn with_temperature(mut self, t: f32) -> Self {
        self.params.temperature = t;
        self
    }

    /// Entropy-dependent temperature in `[t - range, t + range]`.
    pub fn with_dynatemp(mut self, range: f32, exponent: f32) -> Self {
        self.params.dynatemp_range = range;
        self.params.dynatemp_exponent = exponent;
        self
    }

    /// Top-k (`<= 0` = off).
    pub fn with_top_k(mut self, k: i32) -> Self {
        self.params.top_k = k;
        self
    }

    /// Top-p (`>= 1` = off).
    pub fn with_top_p(mut self, p: f32) -> Self {
        self.params.top_p = p;
        self
    }

    /// Min-p (`<= 0` = off).
    pub fn with_min_p(mut self, p: f32) -> Self {
        self.params.min_p = p;
        self
    }

    /// Locally typical sampling (`>= 1` = off).
    pub fn with_typical_p(mut self, p: f32) -> Self {
        self.params.typical_p = p;
        self
    }

    /// Top-n-sigma (`<= 0` = off).
    pub fn with_top_n_sigma(mut self, n: f32) -> Self {
        self.params.top_n_sigma = n;
        self
    }

    /// XTC: removal `probability` (`<= 0` = off) and `threshold` (`> 0.5` = off).
    pub fn with_xtc(mut self, probability: f32, threshold: f32) -> Self {
        self.params.xtc_probability = probability;
        self.params.xtc_threshold = threshold;
        self
    }

    /// Minimum candidates kept by top-p, min-p, typical and XTC.
    pub fn with_min_keep(mut self, n: i32) -> Self {
        self.params.min_keep = n;
        self
    }

    /// Repeat, frequency and presence penalties over the last `last_n` tokens (`-1` = all).
    pub fn with_penalties(mut self, last_n: i32, repeat: f32, freq: f32, present: f32) -> Self {
        self.params.repeat_last_n = last_n;
        self.params.repeat_penalty = repeat;
        self.params.frequency_penalty = freq;
        self.params.presence_penalty = present;
        self
    }

    /// How the repeat penalty is applied (`ctrl`, llama.cpp's rule, or `normalized`).
    pub fn with_penalty_mode(mut self, mode: PenaltyMode) -> Self {
        self.params.repeat_penalty_mode = mode;
        self
    }

    /// Whether prompt tokens count as seen by the penalties (llama.cpp: yes).
    pub fn with_penalize_prompt(mut self, yes: bool) -> Self {
        self.params.penalize_prompt = yes;
        self
    }

    /// Count each token at most once for the frequency penalty.
    pub fn with_penalty_once_per_token(mut self, yes: bool) -> Self {
        self.params.penalty_once_per_token = yes;
        self
    }

    /// Token ids the penalties never touch.
    pub fn with_penalty_exempt(mut self, ids: impl IntoIterator<Item = TokenId>) -> Self {
        self.params.penalty_exempt = ids.into_iter().map(TokenRef::Id).collect();
        self
    }

    /// DRY: `multiplier * base^(len - allowed_length)` over a window of `last_n` tokens (`-1` = all).
    pub fn with_dry(
        mut self,
        multiplier: f32,
        base: f32,
        allowed_length: i32,
        last_n: i32,
    ) -> Self {
        self.params.dry_multiplier = multiplier;
        self.params.dry_base = base;
        self.params.dry_allowed_length = allowed_length;
        self.params.dry_penalty_last_n = last_n;
        self
    }

    /// DRY breakers as token ids `[head, tail...]` (replaces the default string breakers).
    pub fn with_dry_breaker_ids(mut self, breakers: Vec<Vec<TokenId>>) -> Self {
        self.params.dry_sequence_breaker_ids = Some(breakers);
        self
    }

    /// DRY breakers as strings (needs a vocabulary when DRY is on).
    pub fn with_dry_breakers(mut self, breakers: Vec<String>) -> Self {
        self.params.dry_sequence_breakers = Some(breakers);
        self
    }

    /// Mirostat `version` 1 or 2 (0 = off); replaces every slot but logit-bias.
    pub fn with_mirostat(mut self, version: i32, tau: f32, eta: f32) -> Self {
        self.params.mirostat = version;
        self.params.mirostat_tau = tau;
        self.params.mirostat_eta = eta;
        self
    }

    /// End with `adaptive-p(target, decay)` instead of `dist`.
    pub fn with_adaptive_p(mut self, target: f32, decay: f32) -> Self {
        self.params.adaptive_target = target;
        self.params.adaptive_decay = decay;
        if !self.params.samplers.contains(&SamplerType::AdaptiveP) {
            self.params.samplers.push(SamplerType::AdaptiveP);
        }
        self
    }

    /// Add `bias` to one token's logit (`f32::NEG_INFINITY` bans it). Entries accumulate.
    pub fn with_logit_bias(mut self, token: TokenId, bias: f32) -> Self {
        self.params.logit_bias.push(LogitBias {
            token: TokenRef::Id(token),
            bias,
        });
        self
    }

    /// Validate and build.
    pub fn build(&self) -> Result<Chain> {
        build_chain(&self.params, self.terminal, self.n_vocab, self.vocab)
    }
}

#[cfg(test)]
mod tests {
    use super::row_flags;

    /// Every level's flags against their definition: a NaN (either sign) or `+inf` in the
    /// vectorised body or in the tail, rows of `-inf` alone or with one finite value, and an
    /// empty row.
    #[test]
    fn row_flags_on_every_level_match_their_definition() {
        let special = [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
        for level in crate::simd::available() {
            crate::simd::testing::force(Some(level));
            for len in [0usize, 1, 31, 32, 100, 1000] {
                for base in [1.5f32, f32::NEG_INFINITY] {
                    for at in [0, len / 2, len.saturating_sub(1)] {
                        for &x in &special {
                            let mut row = vec![base; len];
                            if len > 0 {
                                row[at] = x;
                            }
                            let bad = row.iter().any(|v| v.is_nan() || *v == f32::INFINITY);
                            let finite = row.iter().any(|&v| v > f32::NEG_INFINITY);
                            let msg =
                                format!("{} len={len} base={base} at={at} x={x}", level.name());
                            assert_eq!(row_flags(&row), (bad, finite), "{msg}");
                        }
                    }
                }
            }
        }
        crate::simd::testing::force(None);
    }
}
