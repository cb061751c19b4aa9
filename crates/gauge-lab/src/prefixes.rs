//! The 200 WikiText-103 prefixes of the A1 probe, embedded so the binary needs no data directory.
//!
//! The manifest is the note's frozen `results/bench_a1/prefixes.json` (copied to `data/` with its
//! provenance): Python's `random.sample` is not portable, so the selection is reused verbatim, and
//! each model re-tokenizes the prefix TEXT with its own tokenizer (docs/PROTOCOL.md §3.1).

use serde::Deserialize;
use std::sync::OnceLock;

const MANIFEST: &str = include_str!("../../../data/a1-prefixes.json");

/// One prefix of the manifest.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Prefix {
    /// Position in the manifest (0..200).
    pub index: usize,
    /// Row of the WikiText-103 test split it was cut from.
    pub source_row_id: usize,
    /// The text given to the model's tokenizer.
    pub prefix_text: String,
}

#[derive(Deserialize)]
struct Manifest {
    prefixes: Vec<Prefix>,
}

/// All prefixes, in manifest order.
pub fn a1_prefixes() -> &'static [Prefix] {
    static P: OnceLock<Vec<Prefix>> = OnceLock::new();
    P.get_or_init(|| {
        // The manifest is compiled in and checked by a test, so a parse failure is a build defect.
        serde_json::from_str::<Manifest>(MANIFEST)
            .map(|m| m.prefixes)
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_has_the_notes_200_prefixes_in_order() {
        let p = a1_prefixes();
        assert_eq!(p.len(), 200);
        assert!(p.iter().enumerate().all(|(i, x)| x.index == i));
        assert_eq!(p[0].source_row_id, 4286);
        assert!(p[0].prefix_text.starts_with(" His place in Roman history"));
        assert_eq!(p[1].source_row_id, 1933);
        assert!(p.iter().all(|x| !x.prefix_text.contains('\n')));
    }
}
