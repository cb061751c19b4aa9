//! `gauge explain`: what every stage of the chain did, on a given logit row or on a real model.
//!
//! On a row (`--logits`, optional `--vocab` names and `--history`) it prints one step; on a model
//! (`--model`, `--prompt`, `-n`) every generated step. Per stage: each candidate's logit and
//! probability before and after, what the stage removed, whether it is shift-invariant, and the
//! selection. `--gauge C` adds the same step on logits shifted by `C` (where `ctrl` moves and
//! `normalized` stands still). The numbers come from `gauge_sampling::explain`.

use crate::sampling_args::{self, ModelParams, SamplingArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use gauge_engine::generate::{GenerateRequest, Generator};
use gauge_engine::{Model, ModelOptions};
use gauge_sampling::explain::{
    explain_step, explain_step_top, shift_step, ShiftExplain, StepExplain,
};
use gauge_sampling::params::SamplingParams;
use gauge_sampling::{Chain, TokenId, Vocab};
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// One logit row, comma-separated (`-inf` allowed): explain one step without a model.
    #[arg(long, allow_hyphen_values = true, conflicts_with_all = ["model", "prompt"])]
    pub logits: Option<String>,
    /// Names of the row's tokens, comma-separated, one per logit (default: the ids).
    #[arg(long, requires = "logits")]
    pub vocab: Option<String>,
    /// Tokens seen before the row, comma-separated names from --vocab or ids (accepted as prompt
    /// tokens, as llama.cpp feeds a prompt).
    #[arg(long, requires = "logits", allow_hyphen_values = true)]
    pub history: Option<String>,
    /// A model (registry name or GGUF path): explain every generated step.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// The prompt text (with --model).
    #[arg(long, short = 'p', requires = "model")]
    pub prompt: Option<String>,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long, requires = "model")]
    pub chat: bool,
    /// Steps to generate and explain (with --model).
    #[arg(short = 'n', long = "n-predict", default_value_t = 4)]
    pub n_predict: usize,
    /// Context window in tokens (with --model).
    #[arg(long, short = 'c', default_value_t = 2048)]
    pub ctx_size: u32,
    /// Candidates shown per stage, most probable first (0 = all).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also explain each step with every logit shifted by this constant.
    #[arg(long, allow_hyphen_values = true)]
    pub gauge: Option<f32>,
    /// Print `{"steps": [...]}` as JSON.
    #[arg(long)]
    pub json: bool,
    /// Show the `?name` placeholder stages in the text output too (they change nothing).
    #[arg(long)]
    pub all_stages: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// One step as printed: the explanation and, with `--gauge`, the shifted one.
#[derive(Serialize)]
struct StepOut {
    #[serde(flatten)]
    step: StepExplain,
    #[serde(skip_serializing_if = "Option::is_none")]
    gauge: Option<ShiftExplain>,
}

#[derive(Serialize)]
struct Out {
    chain: String,
    shift_invariant: bool,
    steps: Vec<StepOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// `--model`: what became of each of the model's GGUF sampling defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_defaults: Option<Value>,
    /// The same as lines for the text report.
    #[serde(skip)]
    default_lines: Vec<String>,
}

/// A vocabulary of whole words, so `--vocab` names work where a request takes strings
/// (logit-bias keys, DRY breakers): a text is one token when it is exactly one name.
struct Words(Vec<String>);

impl Vocab for Words {
    fn n_vocab(&self) -> usize {
        self.0.len()
    }
    fn token_bytes(&self, id: TokenId) -> Vec<u8> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.0.get(i))
            .map_or_else(Vec::new, |w| w.as_bytes().to_vec())
    }
    fn tokenize(&self, text: &str) -> Vec<TokenId> {
        self.0
            .iter()
            .position(|w| w == text)
            .map_or_else(Vec::new, |i| vec![i as TokenId])
    }
    fn eog_tokens(&self) -> Vec<TokenId> {
        Vec::new()
    }
}

fn parse_row(s: &str) -> Result<Vec<f32>> {
    s.split(',')
        .enumerate()
        .map(|(i, x)| {
            let x = x.trim();
            let v: f32 = match x {
                "-inf" => f32::NEG_INFINITY,
                _ => x
                    .parse()
                    .with_context(|| format!("--logits: value {i} ({x:?}) is not a number"))?,
            };
            if v.is_nan() || v == f32::INFINITY {
                bail!("--logits: value {i} is {x}; allowed: finite numbers or -inf");
            }
            Ok(v)
        })
        .collect()
}

fn parse_history(s: &str, words: &Words, n_vocab: usize) -> Result<Vec<TokenId>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some(i) = words.0.iter().position(|n| n == t) {
                return Ok(i as TokenId);
            }
            let id: i64 = t.parse().map_err(|_| {
                anyhow::anyhow!("--history: {t:?} is neither a --vocab name nor a token id")
            })?;
            if id < 0 || id as usize >= n_vocab {
                bail!("--history: token id {id} is out of range; allowed: 0..{n_vocab}");
            }
            Ok(id as TokenId)
        })
        .collect()
}

/// Explain one step, with the shifted view when asked; leaves `chain` where sampling would.
fn explain_one(
    chain: &mut Chain,
    row: &[f32],
    gauge: Option<f32>,
    top: usize,
    text_of: &dyn Fn(TokenId) -> String,
) -> gauge_sampling::Result<StepOut> {
    let limit = (top > 0).then_some(top);
    let (mut step, mut shifted) = match gauge {
        // The shifted comparison reads every candidate, so truncate only afterwards.
        Some(c) => {
            let before = chain.clone();
            let mut step = explain_step(chain, row)?;
            let mut s = shift_step(&before, row, &step, c)?;
            if let Some(k) = limit {
                step.truncate(k);
                s.step.truncate(k);
            }
            (step, Some(s))
        }
        None => (explain_step_top(chain, row, limit)?, None),
    };
    step.label(text_of);
    if let Some(s) = shifted.as_mut() {
        s.step.label(text_of);
    }
    Ok(StepOut {
        step,
        gauge: shifted,
    })
}

fn params_of(args: &ExplainArgs) -> Result<SamplingParams> {
    args.sampling.to_params()
}

/// The flags over the model's GGUF sampling defaults (`--model` runs).
fn params_for_model(args: &ExplainArgs, model: &Model, name: &str) -> Result<ModelParams> {
    sampling_args::params_for_model(&args.sampling.layer()?, model, name)
}

fn run_row(args: &ExplainArgs, row_text: &str) -> Result<Out> {
    let row = parse_row(row_text)?;
    // Without --vocab the names are the ids: string fields (DRY's default breakers) then resolve
    // to nothing instead of needing a tokenizer.
    let names: Vec<String> = match &args.vocab {
        Some(v) => v.split(',').map(|s| s.trim().to_string()).collect(),
        None => (0..row.len()).map(|i| i.to_string()).collect(),
    };
    if names.len() != row.len() {
        bail!(
            "--vocab has {} names but --logits has {} values; allowed: one name per logit",
            names.len(),
            row.len()
        );
    }
    let words = Words(names);
    let params = params_of(args)?;
    params.validate(row.len())?;
    let mut chain = Chain::from_params(&params, row.len(), Some(&words))?;
    let history = match &args.history {
        Some(h) => parse_history(h, &words, row.len())?,
        None => Vec::new(),
    };
    for &t in &history {
        chain.accept_prompt(t);
    }
    let text_of = |id: TokenId| words.0[id as usize].clone();
    let describe = chain.describe();
    let invariant = gauge_sampling::gauge::is_shift_invariant(&chain);
    let step = explain_one(&mut chain, &row, args.gauge, args.top, &text_of)?;
    Ok(Out {
        chain: describe,
        shift_invariant: invariant,
        steps: vec![step],
        text: None,
        model_defaults: None,
        default_lines: Vec::new(),
    })
}

fn run_model(args: &ExplainArgs, name: &str) -> Result<Out> {
    let Some(prompt) = &args.prompt else {
        bail!("--model needs --prompt TEXT");
    };
    let opts = ModelOptions {
        n_ctx: args.ctx_size,
        ..Default::default()
    };
    let model = Arc::new(Model::open(name, opts).with_context(|| format!("loading model {name}"))?);
    let with_model = params_for_model(args, &model, name)?;
    let params = &with_model.params;
    params.validate(model.n_vocab())?;
    let mut chain = Chain::from_params(params, model.n_vocab(), Some(&*model))?;
    let describe = chain.describe();
    let invariant = gauge_sampling::gauge::is_shift_invariant(&chain);
    let req = GenerateRequest {
        prompt: prompt.clone(),
        chat: args.chat,
        max_tokens: Some(args.n_predict),
        ignore_eos: false,
    };
    let text_model = Arc::clone(&model);
    let text_of = move |id: TokenId| {
        String::from_utf8_lossy(&text_model.token_bytes_checked(id, true).unwrap_or_default())
            .into_owned()
    };
    let mut steps = Vec::new();
    let mut gen = Generator::new(model)?;
    let (gauge, top) = (args.gauge, args.top);
    let result = gen.generate_with(
        &req,
        &mut chain,
        &mut |c: &mut Chain, row: &[f32]| {
            let step = explain_one(c, row, gauge, top, &text_of)?;
            let tok = step.step.selected.id;
            c.accept(tok);
            steps.push(step);
            Ok(tok)
        },
        &mut |_| true,
    )?;
    Ok(Out {
        chain: describe,
        shift_invariant: invariant,
        steps,
        text: Some(result.text),
        model_defaults: Some(with_model.json()),
        default_lines: with_model.lines,
    })
}

fn fmt_logit(x: Option<f32>) -> String {
    x.map_or_else(|| "-inf".to_string(), |v| format!("{v:.3}"))
}

/// The text report; written with `?` so a closed pipe (`| head`) ends it quietly, never a panic.
fn print_text(w: &mut impl Write, out: &Out, all_stages: bool) -> std::io::Result<()> {
    writeln!(w, "sampler chain: {}", out.chain)?;
    for line in &out.default_lines {
        writeln!(w, "{line}")?;
    }
    for (k, s) in out.steps.iter().enumerate() {
        writeln!(w, "\nstep {}", k + 1)?;
        for (j, st) in s.step.stages.iter().enumerate() {
            if st.name.starts_with('?') && !all_stages {
                continue;
            }
            let inv = if st.shift_invariant {
                "shift-invariant".to_string()
            } else {
                format!("NOT shift-invariant: {}", st.shift_reason.unwrap_or(""))
            };
            writeln!(
                w,
                "  {}  [{}]  candidates {} -> {}, removed {}, entropy {:.3} -> {:.3} nats",
                st.name, inv, st.n_before, st.n_after, st.n_removed, st.entropy_before, st.entropy
            )?;
            for ((name, b), (_, a)) in st.state_before.iter().zip(&st.state) {
                writeln!(w, "    {name}: {b:.4} -> {a:.4}")?;
            }
            writeln!(
                w,
                "    {:<16} {:>9} {:>9} {:>9} {:>9}",
                "token", "logit", "after", "p before", "p after"
            )?;
            for c in &st.candidates {
                let gone = if c.logit_before.is_some() && c.logit.is_none() {
                    "  removed"
                } else {
                    ""
                };
                writeln!(
                    w,
                    "    {:<16} {:>9} {:>9} {:>9.4} {:>9.4}{gone}",
                    format!("{:?}", c.token.as_deref().unwrap_or("")),
                    fmt_logit(c.logit_before),
                    fmt_logit(c.logit),
                    c.p_before,
                    c.p
                )?;
            }
            if let Some(g) = &s.gauge {
                writeln!(
                    w,
                    "    shifted by {}: max |dp| {:.2e}",
                    g.c, g.max_abs_dp[j]
                )?;
            }
        }
        let sel = &s.step.selected;
        writeln!(
            w,
            "  selected: {:?} (id {}, p {:.4})",
            sel.token.as_deref().unwrap_or(""),
            sel.id,
            sel.p
        )?;
        if let Some(g) = &s.gauge {
            writeln!(
                w,
                "  shifted by {}: selected {:?} (id {}, p {:.4}) -- {}",
                g.c,
                g.step.selected.token.as_deref().unwrap_or(""),
                g.step.selected.id,
                g.step.selected.p,
                if g.same_token {
                    "same token"
                } else {
                    "a DIFFERENT token: the chain depends on where the logits sit"
                }
            )?;
        }
    }
    if let Some(t) = &out.text {
        writeln!(w, "\ntext: {t:?}")?;
    }
    Ok(())
}

pub fn run(args: &ExplainArgs) -> Result<()> {
    let out = match (&args.logits, &args.model) {
        (Some(row), _) => run_row(args, row)?,
        (None, Some(m)) => run_model(args, m)?,
        (None, None) => bail!("give a row (--logits ...) or a model (--model M --prompt ...)"),
    };
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut w, &out).map_err(std::io::Error::from)?;
        writeln!(w)?;
    } else {
        print_text(&mut w, &out, args.all_stages)?;
    }
    w.flush()?;
    Ok(())
}
