//! `dry` (STUB: not implemented yet).

use crate::candidates::{Candidates, TokenId};
use crate::sampler::{Sampler, Shift};
use crate::samplers::penalties::Window;
use crate::samplers::placeholder::Placeholder;

/// Configuration of the DRY stage.
#[derive(Clone, Debug, PartialEq)]
pub struct DryConfig {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: i32,
    pub penalty_last_n: Window,
    /// Sequence breakers as token ids: `[head, tail...]` (llama.cpp's `init_dry_testing` form).
    pub breakers: Vec<Vec<TokenId>>,
}

/// STUB
#[derive(Clone, Debug)]
pub struct Dry {
    cfg: DryConfig,
}

/// Build the stage as llama.cpp's init does (a `?dry` placeholder when disabled).
pub fn build(cfg: DryConfig) -> Box<dyn Sampler> {
    if cfg.multiplier == 0.0 || cfg.base < 1.0 || cfg.penalty_last_n.is_disabled() {
        return Placeholder::boxed("?dry");
    }
    Box::new(Dry { cfg })
}

impl Sampler for Dry {
    fn name(&self) -> &str {
        "dry"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        let _ = &self.cfg;
        unimplemented!("STUB dry")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
