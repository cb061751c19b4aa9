//! Run the A1 probe on a real GGUF model (timing and wiring reference for the CLI).
//!
//! `cargo run --release -p gauge-lab --example probe_llama -- [model] [prefixes] [tokens] [thetas] [out]`
//! e.g. `... smollm2-135m-instruct 20 64 1,1.3 results`.

use gauge_engine::{LlamaSource, Model, ModelOptions};
use gauge_lab::{render_table, run_probe, Grid, ProbeConfig};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let model_name = arg(0, "smollm2-135m-instruct");
    let mut cfg = ProbeConfig {
        model: model_name.clone(),
        prefixes: arg(1, "20").parse()?,
        tokens: arg(2, "64").parse()?,
        thetas: arg(3, "1,1.3")
            .split(',')
            .map(str::parse)
            .collect::<Result<_, _>>()?,
        ..ProbeConfig::default()
    };
    let out = arg(4, "results");
    let n_seq_max = 256u32;
    cfg.fit_batch(n_seq_max as usize);
    let opts = ModelOptions {
        n_ctx: 512,
        n_seq_max,
        n_batch: 512,
        ..Default::default()
    };
    let model = Arc::new(Model::open(&model_name, opts)?);
    let mut src = LlamaSource::new(Arc::clone(&model))?;
    let t0 = std::time::Instant::now();
    // The prefixes are tokenized with the model's defaults (BOS iff it asks for one), as the note.
    let s = run_probe(
        &mut src,
        model.as_ref(),
        &cfg,
        std::path::Path::new(&out),
        true,
    )?;
    print!("{}", render_table(&s));
    eprintln!(
        "elapsed {:.1}s, run dir {}",
        t0.elapsed().as_secs_f64(),
        gauge_lab::probe::run_dir(std::path::Path::new(&out), &cfg).display()
    );
    Ok(())
}
