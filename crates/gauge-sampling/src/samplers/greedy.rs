//! `greedy`: pick the largest logit (llama.cpp `llama_sampler_init_greedy`).
//!
//! A strict `>` scan in the **current array order**, so among tied maxima the one that comes first
//! in the array wins (not the lowest token id). Order, size and `p` are untouched; no RNG.
//! llama.cpp sets `selected = 0` on an empty array and the chain then asserts; here an empty array
//! gets `selected = None`, which the chain reports as a typed error.

use crate::candidates::{Candidates, TokenData, TokenId};
use crate::kernels::reduce::first_max;
use crate::overlay::Overlay;
use crate::sampler::{FromRow, Sampler, Shift};

/// Argmax in array order.
#[derive(Clone, Debug)]
pub struct Greedy;

impl Greedy {
    /// The stage (greedy has no parameters).
    pub fn new() -> Self {
        Greedy
    }
}

impl Default for Greedy {
    fn default() -> Self {
        Greedy
    }
}

/// Build the stage (greedy has no parameters and no placeholder form).
pub fn build() -> Box<dyn Sampler> {
    Box::new(Greedy::new())
}

impl Sampler for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn apply(&mut self, cur: &mut Candidates) {
        let s = cur.as_slice();
        if s.is_empty() {
            cur.selected = None;
            return;
        }
        let mut sel = 0;
        for (i, t) in s.iter().enumerate().skip(1) {
            if t.logit > s[sel].logit {
                sel = i;
            }
        }
        cur.selected = Some(sel);
    }
    /// One pass over the row. The array left behind holds only the chosen candidate (selected 0):
    /// greedy never reads the rest, and filling it would cost more than the scan.
    fn apply_from_row(&mut self, row: &[f32], ov: &Overlay, cur: &mut Candidates) -> FromRow {
        let Some(i) = first_max(row, ov) else {
            return FromRow::Invalid;
        };
        let logit = ov.get(row, i);
        if logit == f32::NEG_INFINITY {
            // everything is banned: let the slow path decide (and report an all -inf input row)
            return FromRow::Declined;
        }
        cur.set_data(
            [TokenData {
                id: i as TokenId,
                logit,
                p: 0.0,
            }],
            false,
        );
        cur.selected = Some(0);
        FromRow::Done
    }
    /// Invariant: the argmax does not move with a common shift.
    fn shift(&self) -> Shift {
        Shift::Invariant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::TokenData;

    #[test]
    fn empty_selects_nothing() {
        let mut c = Candidates::new();
        build().apply(&mut c);
        assert_eq!(c.selected, None);
    }

    #[test]
    fn size_one_selects_it() {
        let mut c = Candidates::from_logits(&[f32::NEG_INFINITY]);
        build().apply(&mut c);
        assert_eq!(c.selected, Some(0));
    }

    #[test]
    fn ties_go_to_the_first_in_array_order_not_the_lowest_id() {
        let data = vec![
            TokenData {
                id: 9,
                logit: 1.0,
                p: 0.0,
            },
            TokenData {
                id: 2,
                logit: 3.0,
                p: 0.0,
            },
            TokenData {
                id: 1,
                logit: 3.0,
                p: 0.0,
            },
        ];
        let mut c = Candidates::from_data(data, false);
        build().apply(&mut c);
        assert_eq!(c.selected, Some(1));
        assert_eq!(c.selected_token(), Some(2));
        assert_eq!(c.ids(), [9, 2, 1], "greedy does not reorder");
    }
}
