//! What long measurements share, in the engine's benchmarks and gauge-lab's experiments (which
//! depend on this crate without its `llama` and `bench` features): the median of repeated
//! values and a progress bar on stderr.

/// The median (mean of the middle two for an even count, as Python's `statistics.median`); NaN
/// for no values. Sorts `v` in place.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// A progress bar of `len` steps drawn with the indicatif `template` (the default bar if the
/// template does not parse); hidden when `on` is false.
pub fn progress_bar(on: bool, len: u64, template: &str) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}
