//! What every experiment's tables and reports share: the stack note in titles, the work line,
//! the end of a report, and the cell formatters. The probe's own tables and report are in
//! [`crate::probe`]'s `report` module (re-exported here, where they used to live).

use std::fmt::Write as _;

pub use crate::probe::{
    probe_report, render_table, write_probe_plots, NOTE_FLIP, NOTE_LOOP, NOTE_ZERO_POINT,
};

/// " (sampler: llama-cpp)" for the cross-stack runs, nothing for gauge's own.
pub(crate) fn stack_note(s: crate::stack::Stack) -> String {
    if s.is_gauge() {
        String::new()
    } else {
        format!(" (sampler: {s})")
    }
}

/// How many times fewer tokens the shared decode evaluated than a naive one (0 for no work).
pub fn work_saving(forward_tokens: u64, naive_forward_tokens: u64) -> f64 {
    if forward_tokens > 0 {
        naive_forward_tokens as f64 / forward_tokens as f64
    } else {
        0.0
    }
}

/// The last line of every experiment's terminal table: the work the shared decode saved.
pub fn work_line(forward_tokens: u64, naive_forward_tokens: u64) -> String {
    format!(
        "forward tokens: {} (naive {}, {:.2}× less)",
        forward_tokens,
        naive_forward_tokens,
        work_saving(forward_tokens, naive_forward_tokens)
    )
}

/// The end of the json and delim reports: the work done, then the plots.
pub(crate) fn work_and_plots(o: &mut String, forward_tokens: u64, naive: u64, plots: &[String]) {
    let _ = writeln!(
        o,
        "\nWork: {forward_tokens} forward tokens evaluated vs {naive} for a naive run.\n"
    );
    for p in plots {
        let _ = writeln!(o, "![{p}]({p}.svg) ([PNG]({p}.png))\n");
    }
}

/// A table cell: `v` with `prec` decimals, `—` when there is no value.
pub(crate) fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.prec$}"))
}

/// A label cut to at most `max_chars` characters (the last one `…` when cut), for plot legends.
pub(crate) fn short(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        s.chars().take(max_chars - 1).collect::<String>() + "…"
    }
}
