//! The run core every experiment is built on: an experiment is its own definitions (a config, a
//! plan of runs per prompt, the lines it writes, an analysis) plus this core.
//!
//! * [`spec`]: runs ([`RunSpec`], with the experiment's own role tag), plans, chunking, and the
//!   checks of the fields every grid shares;
//! * [`codec`]: the one tokenizer trait ([`Codec`]), implemented once for the engine's model;
//! * [`decode`]: the shared decode tree over a [`gauge_engine::LogitSource`], which is the seam a
//!   new engine plugs into; what an experiment records while decoding is its [`Observer`];
//! * [`resume`]: run directories that survive being killed, and the chunk loop that fills them.

pub mod codec;
pub mod decode;
pub mod resume;
pub mod spec;

pub use codec::Codec;
pub use decode::{NoObserver, Observer};
pub use spec::{op_theta_plan, Chunking, Grid, RunSpec};

/// How to run, beyond what is measured.
#[derive(Debug, Clone, Copy)]
pub struct RunControl {
    /// Draw progress bars on stderr.
    pub progress: bool,
    /// Stop with [`crate::LabError::Aborted`] after this many chunks were decoded by this call
    /// (tests of resumption).
    pub abort_after_chunks: Option<usize>,
    /// Share sequences between agreeing runs (default). `false` decodes every run on its own
    /// sequence with the reference operators: the naive run that validates the sharing logic.
    pub sharing: bool,
    /// Write plots (SVG + PNG).
    pub plots: bool,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            progress: false,
            abort_after_chunks: None,
            sharing: true,
            plots: true,
        }
    }
}

impl RunControl {
    /// The decode options of a run with these controls.
    pub(crate) fn decode_options(
        &self,
        tokens: usize,
        window: Option<usize>,
        stack: crate::stack::Stack,
    ) -> decode::DecodeOptions {
        decode::DecodeOptions {
            tokens,
            window,
            sharing: self.sharing,
            naive_ops: !self.sharing,
            stack,
            seen_prompt: true,
        }
    }
}
