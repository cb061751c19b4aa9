//! `gauge generate`: stream a continuation from a real model, sampled by gauge's chain.

use crate::constraint_args::{self, ConstraintArgs};
use crate::sampling_args::{self, SamplingArgs};
use anyhow::{Context, Result};
use clap::Args;
use gauge_engine::generate::{GenerateRequest, Generator};
use gauge_engine::{Model, ModelOptions};
use gauge_sampling::Chain;
use std::io::Write;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// The prompt text.
    #[arg(long, short = 'p')]
    pub prompt: String,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    pub chat: bool,
    /// Tokens to generate.
    #[arg(
        short = 'n',
        long = "n-predict",
        visible_alias = "max-tokens",
        default_value_t = 128
    )]
    pub n_predict: usize,
    /// Keep generating past end-of-generation tokens (they are also banned, as in llama.cpp).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Context window in tokens.
    #[arg(long, short = 'c', default_value_t = 2048)]
    pub ctx_size: u32,
    /// llama.cpp threads (0 = all cores but one).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
    /// Print token ids and text as JSON at the end instead of streaming text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

pub fn run(args: &GenerateArgs) -> Result<()> {
    // The user's settings, checked before the model loads; the model's own defaults fill in
    // what they leave unset.
    let layer = args.sampling.layer()?;
    let opts = ModelOptions {
        n_ctx: args.ctx_size,
        n_threads: args.threads,
        n_gpu_layers: args.n_gpu_layers,
        ..Default::default()
    };
    let model = Arc::new(
        Model::open(&args.model, opts).with_context(|| format!("loading model {}", args.model))?,
    );
    let with_model = sampling_args::params_for_model(&layer, &model, &args.model)?;
    let mut params = with_model.params;
    if args.ignore_eos {
        params.ignore_eos = true;
    }
    params.validate(model.n_vocab())?;
    let chain = Chain::from_params(&params, model.n_vocab(), Some(&*model))?;
    let constraint = args.constraint.request()?;
    let mut chain = constraint_args::apply(
        chain,
        constraint.as_ref(),
        || constraint_args::model_vocab(&model),
        &params,
    )?;
    eprintln!("sampler seed: {}", params.resolved_seed());
    eprintln!("sampler params: \n{}", params.print_params());
    eprintln!("sampler chain: {}", chain.describe());
    for line in &with_model.lines {
        eprintln!("{line}");
    }
    let req = GenerateRequest {
        prompt: args.prompt.clone(),
        chat: args.chat,
        max_tokens: Some(args.n_predict),
        ignore_eos: args.ignore_eos,
    };
    let mut gen = Generator::new(model)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let json = args.json;
    let result = gen.generate(&req, &mut chain, &mut |piece: &str| {
        if json {
            return true;
        }
        // a closed pipe stops generation quietly
        out.write_all(piece.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        let _ = writeln!(out);
    }
    Ok(())
}
