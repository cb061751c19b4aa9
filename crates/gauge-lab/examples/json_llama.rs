//! Run A2 (JSON validity) on a real GGUF model (timing and wiring reference for the CLI).
//!
//! `cargo run --release -p gauge-lab --example json_llama -- [model] [schemas] [thetas] [out]`

use gauge_engine::{LlamaSource, Model, ModelOptions};
use gauge_lab::json::{render_json_table, run_json, JsonConfig};
use gauge_lab::{Grid, RunControl};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let model_name = arg(0, "smollm2-135m-instruct");
    let mut cfg = JsonConfig {
        model: model_name.clone(),
        schemas: arg(1, "20").parse()?,
        thetas: arg(2, "1,1.1,1.3")
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()?,
        ..JsonConfig::default()
    };
    let n_seq_max = 64u32;
    cfg.fit_batch(n_seq_max as usize);
    let opts = ModelOptions {
        n_ctx: 2048,
        n_seq_max,
        n_batch: 512,
        ..Default::default()
    };
    let model = Arc::new(Model::open(&model_name, opts)?);
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let out = arg(3, "results");
    let t0 = std::time::Instant::now();
    let ctl = RunControl {
        progress: true,
        ..RunControl::default()
    };
    // Plain prompts (no chat template), tokenized as the note's llama.cpp A2 driver did.
    let s = run_json(
        &mut src,
        model.as_ref(),
        &cfg,
        std::path::Path::new(&out),
        &ctl,
    )?;
    print!("{}", render_json_table(&s));
    eprintln!("elapsed {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}
