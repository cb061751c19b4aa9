//! `penalties` (STUB: not implemented yet).

use crate::candidates::{Candidates, TokenId};
use crate::sampler::{Sampler, Shift};
use crate::samplers::placeholder::Placeholder;

/// Which operator the repeat penalty uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PenaltyMode {
    /// llama.cpp / HF / vLLM / CTRL: `z <= 0 ? z*θ : z/θ` on raw logits. Not shift-invariant.
    #[default]
    Ctrl,
    /// Log-softmax over the full row first, then `ℓ*θ` for every seen token. Shift-invariant.
    Normalized,
}

/// How many recent tokens count as "seen".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The last `n` accepted tokens; `Last(0)` disables the stage (llama.cpp's `0`).
    Last(usize),
    /// The whole history (`-1`). llama.cpp clamps `-1` to 0 and silently disables the penalty;
    /// gauge means what the user asked for.
    All,
}

impl Window {
    /// From llama.cpp's integer convention, with gauge's meaning for `-1`.
    /// Values below -1 are rejected by parameter validation before this is called.
    pub fn from_i32(n: i32) -> Window {
        if n < 0 {
            Window::All
        } else {
            Window::Last(n as usize)
        }
    }
    pub fn is_disabled(self) -> bool {
        self == Window::Last(0)
    }
}

/// Configuration of the `penalties` stage.
#[derive(Clone, Debug, PartialEq)]
pub struct PenaltiesConfig {
    pub n_vocab: usize,
    pub last_n: Window,
    pub repeat: f32,
    pub freq: f32,
    pub present: f32,
    pub mode: PenaltyMode,
    /// Whether tokens accepted through `accept_prompt` count as seen (llama.cpp: yes).
    pub count_prompt: bool,
    /// Count each token at most once for the frequency penalty (membership only).
    pub once_per_token: bool,
    /// Token ids the penalties never touch (e.g. JSON delimiters).
    pub exempt: Vec<TokenId>,
}

/// STUB
#[derive(Clone, Debug)]
pub struct Penalties {
    cfg: PenaltiesConfig,
}

/// Build the stage as llama.cpp's init does (a `?penalties` placeholder when disabled).
pub fn build(cfg: PenaltiesConfig) -> Box<dyn Sampler> {
    if cfg.last_n.is_disabled() || (cfg.repeat == 1.0 && cfg.freq == 0.0 && cfg.present == 0.0) {
        return Placeholder::boxed("?penalties");
    }
    Box::new(Penalties { cfg })
}

impl Sampler for Penalties {
    fn name(&self) -> &str {
        "penalties"
    }
    fn apply(&mut self, _cur: &mut Candidates) {
        let _ = &self.cfg;
        unimplemented!("STUB penalties")
    }
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
    fn box_clone(&self) -> Box<dyn Sampler> {
        Box::new(self.clone())
    }
}
