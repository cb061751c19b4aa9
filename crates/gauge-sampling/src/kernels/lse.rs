//! The normalized penalty's two reads of the row, its max and its log-sum-exp, as dispatched
//! kernels ([`crate::simd`]): the same arithmetic as `apply_normalized` on a filled array, in the
//! same order, compiled for each instruction set.

use super::span_max;
use crate::samplers::penalties::lse_impl;
use crate::simd::multiversion;

multiversion! {
    /// The largest value (`apply_normalized`'s fold: NaN never wins, `-inf` for an empty row).
    /// Lane-wise, so it vectorises; equal values are the same value except ±0, where the first
    /// one met decides the sign, so a zero maximum is settled by the fold itself.
    pub(crate) fn row_max(values: &[f32]) -> f32 {
        let max = span_max(values, &mut false);
        if max == 0.0 {
            return values
                .iter()
                .fold(f32::NEG_INFINITY, |m, &z| if z > m { z } else { m });
        }
        max
    }
}

multiversion! {
    /// `log_sum_exp_offset(values, |&z| z, max)`, bit for bit.
    pub(crate) fn row_lse(values: &[f32], max: f32) -> f64 {
        lse_impl(values, |&z| z, max)
    }
}
