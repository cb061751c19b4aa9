//! The flags every lab command (`probe`, `json`, `delim`, `calibrate`) shares, and the model and
//! run control they build, defined once.

use anyhow::{Context, Result};
use clap::Args;
use gauge_engine::{Model, ModelOptions};
use gauge_lab::RunControl;
use std::path::PathBuf;
use std::sync::Arc;

/// Model, results root, output form and llama.cpp's compute flags of a lab run.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Registry name (pulled on first use) or path to a GGUF file.
    #[arg(long, short = 'm', default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Results root; the run goes to <out>/<run-id>/.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Print the summary JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// llama.cpp decode threads (0 = all cores, llama.cpp's own default; give fewer on a busy
    /// machine, where ggml's spinning threads slow down sharply when they outnumber free cores).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (llama.cpp's `-ngl`; needs a GPU build).
    #[arg(long, visible_alias = "gpu-layers", default_value_t = 0)]
    pub n_gpu_layers: u32,
}

impl RunArgs {
    /// llama.cpp options for a batched lab decode: `n_ctx` per sequence, `n_seq_max` sequences.
    pub fn model_options(&self, n_ctx: u32, n_seq_max: u32) -> ModelOptions {
        ModelOptions {
            n_ctx,
            n_seq_max,
            n_threads: batch_threads(self.threads),
            n_batch: 512,
            n_gpu_layers: self.n_gpu_layers,
            ..Default::default()
        }
    }

    /// Open `--model` (pulling a registry name on first use) with `opts`.
    pub fn open_model(&self, opts: ModelOptions) -> Result<Arc<Model>> {
        let model = Model::open(&self.model, opts)
            .with_context(|| format!("loading model {}", self.model))?;
        Ok(Arc::new(model))
    }

    /// The model's label in reports and run ids: a GGUF path's file stem, else the name as given.
    pub fn model_label(&self) -> String {
        let p = std::path::Path::new(&self.model);
        if p.extension().is_some_and(|e| e == "gguf") {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| self.model.clone())
        } else {
            self.model.clone()
        }
    }
}

/// Run control of an interactive lab run: progress bars on stderr.
pub fn interactive() -> RunControl {
    RunControl {
        progress: true,
        ..RunControl::default()
    }
}

/// Threads for the lab's batch jobs: `0` = every available core. The engine's own auto leaves one
/// core free for interactive use; a probe is a batch job that owns the machine, and on 2 cores the
/// second thread makes the full grid 1.8× faster (docs/results.md).
pub fn batch_threads(requested: u32) -> u32 {
    if requested > 0 {
        return requested;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}
