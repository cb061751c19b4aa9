//! One file per sampler, each with llama.cpp's semantics. Every stage type is re-exported here
//! (`samplers::TopK`, `samplers::Penalties`, ...) and has `X::new(..)`, the stage itself, for
//! [`crate::Chain::from_stages`]; each module's `build(..)` is the thin boxed form the chain
//! builder uses, returning the `?name` placeholder where llama.cpp's init function would.

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

pub use adaptive_p::AdaptiveP;
pub use dist::Dist;
pub use dry::{Dry, DryConfig};
pub use greedy::Greedy;
pub use logit_bias::LogitBias;
pub use min_p::MinP;
pub use mirostat::Mirostat;
pub use mirostat_v2::MirostatV2;
pub use penalties::{Penalties, PenaltiesConfig, PenaltyMode};
pub use placeholder::Placeholder;
pub use temp::Temp;
pub use temp_ext::TempExt;
pub use top_k::TopK;
pub use top_n_sigma::TopNSigma;
pub use top_p::TopP;
pub use typical::Typical;
pub use xtc::Xtc;

/// Helpers shared by the samplers' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::candidates::Candidates;
    use crate::overlay::Overlay;
    use crate::sampler::Sampler;

    /// `apply_sparse` on a clone of `s` must give the dense `apply`'s logits bit for bit, and the
    /// edit must change the row (a case that edits nothing would prove nothing).
    pub(crate) fn assert_sparse_matches_dense<S: Sampler + Clone>(s: &S, row: &[f32]) {
        let (mut dense, mut sparse) = (s.clone(), s.clone());
        let mut cur = Candidates::from_logits(row);
        dense.apply(&mut cur);
        let mut ov = Overlay::default();
        ov.reset(row.len());
        assert!(sparse.apply_sparse(row, &mut ov), "no sparse path");
        let mut via = Candidates::new();
        ov.materialize(row, &mut via);
        let bits = |c: &Candidates| -> Vec<u32> {
            c.as_slice().iter().map(|t| t.logit.to_bits()).collect()
        };
        assert_eq!(bits(&via), bits(&cur));
        let unchanged: Vec<u32> = row.iter().map(|x| x.to_bits()).collect();
        assert_ne!(bits(&via), unchanged, "the case edits nothing");
    }
}
