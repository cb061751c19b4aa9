//! One file per sampler, each with llama.cpp's semantics and a `build` that returns the `?name`
//! placeholder where llama.cpp's init function would.

pub mod adaptive_p;
pub mod dist;
pub mod dry;
pub mod greedy;
pub mod logit_bias;
pub mod min_p;
pub mod mirostat;
pub mod mirostat_v2;
pub mod penalties;
pub mod placeholder;
pub mod temp;
pub mod temp_ext;
pub mod top_k;
pub mod top_n_sigma;
pub mod top_p;
pub mod typical;
pub mod xtc;
