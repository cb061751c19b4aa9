//! Plots as hand-written SVG, rasterised to PNG with `resvg`.
//!
//! The charts are simple (a few lines or bars), so writing the SVG directly is shorter than a
//! plotting framework and needs no font at write time: the SVG names common families and any
//! viewer renders its text. The PNG copy uses the fonts `resvg` finds on the system (no
//! fontconfig library needed); without any font the PNG still has every line and bar, only no
//! text.

use crate::error::LabError;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, OnceLock};

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 56.0;
const FONT: &str = "DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif";
const PALETTE: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One line of a line chart; `err` gives an optional (lo, hi) bar per point.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub err: Option<Vec<(f64, f64)>>,
    /// Dashed lines mark reference data (e.g. the note's numbers).
    pub dashed: bool,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub y_range: (f64, f64),
    pub series: Vec<Series>,
}

/// One bar of a bar chart.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// Drawn in the accent colour (this run's model among reference models).
    pub highlight: bool,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fmt_num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Evenly spaced "nice" ticks covering `[lo, hi]`.
fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last)
        .map(|k| ((k as f64 * step) * 1e9).round() / 1e9)
        .collect()
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="{FONT}" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{}" y="26" font-size="15" font-weight="bold" text-anchor="middle">{}</text>
"#,
        (LEFT + W - RIGHT) / 2.0,
        esc(title)
    );
}

fn axes(
    out: &mut String,
    x_label: &str,
    y_label: &str,
    y_ticks: &[f64],
    ymap: &dyn Fn(f64) -> f64,
) {
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    for &t in y_ticks {
        let y = ymap(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#e5e5e5"/>"##
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            x0 - 6.0,
            y + 4.0,
            fmt_num(t)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        x1 - x0,
        y1 - y0
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        H - 14.0,
        esc(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
}

/// Render a line chart as SVG.
pub fn line_chart_svg(c: &LineChart) -> String {
    let mut out = String::new();
    header(&mut out, &c.title);
    let xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let (mut xlo, mut xhi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    if !xlo.is_finite() {
        (xlo, xhi) = (0.0, 1.0);
    }
    if xhi <= xlo {
        (xlo, xhi) = (xlo - 0.5, xhi + 0.5);
    }
    let pad = (xhi - xlo) * 0.05;
    let (xlo, xhi) = (xlo - pad, xhi + pad);
    let (ylo, yhi) = if c.y_range.1 > c.y_range.0 {
        c.y_range
    } else {
        (c.y_range.0 - 1.0, c.y_range.0 + 1.0)
    };
    let xmap = |x: f64| LEFT + (x - xlo) / (xhi - xlo) * (W - RIGHT - LEFT);
    let ymap = |y: f64| H - BOTTOM - (y - ylo) / (yhi - ylo) * (H - BOTTOM - TOP);
    axes(
        &mut out,
        &c.x_label,
        &c.y_label,
        &nice_ticks(ylo, yhi, 5),
        &ymap,
    );
    // x ticks at the distinct data x values (θ grids are short)
    let mut xt: Vec<f64> = xs.clone();
    xt.sort_by(|a, b| a.total_cmp(b));
    xt.dedup();
    if xt.len() > 12 {
        xt = nice_ticks(xlo, xhi, 8);
    }
    for &x in &xt {
        let px = xmap(x);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#333"/>"##,
            H - BOTTOM,
            H - BOTTOM + 5.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            H - BOTTOM + 18.0,
            fmt_num(x)
        );
    }
    for (i, s) in c.series.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let mut pts: Vec<(f64, f64)> = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", xmap(x), ymap(y.clamp(ylo, yhi))))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        // Earlier series are drawn wider, so a later one on top of it (two ops both at 0) leaves
        // a visible border instead of hiding it.
        let width = 2.0 + 1.8 * (c.series.len() - 1 - i) as f64;
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{col}" stroke-width="{width}" stroke-linejoin="round"{dash}/>"#,
            path.join(" ")
        );
        for (k, &(x, y)) in s.points.iter().enumerate() {
            let (px, py) = (xmap(x), ymap(y.clamp(ylo, yhi)));
            if let Some((lo, hi)) = s.err.as_ref().and_then(|e| e.get(k)) {
                let (a, b) = (ymap(lo.clamp(ylo, yhi)), ymap(hi.clamp(ylo, yhi)));
                let _ = writeln!(
                    out,
                    r#"<line x1="{px:.1}" y1="{a:.1}" x2="{px:.1}" y2="{b:.1}" stroke="{col}" stroke-width="1.5"/>"#
                );
                for yy in [a, b] {
                    let _ = writeln!(
                        out,
                        r#"<line x1="{:.1}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{col}"/>"#,
                        px - 4.0,
                        px + 4.0
                    );
                }
            }
            let _ = writeln!(
                out,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="{:.1}" fill="{col}"/>"#,
                2.0 + width / 2.0
            );
        }
        let ly = TOP + 14.0 + 20.0 * i as f64;
        let lx = W - RIGHT + 14.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{col}" stroke-width="2"{dash}/>"#,
            lx + 22.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 28.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// Render a bar chart as SVG.
pub fn bar_chart_svg(title: &str, y_label: &str, bars: &[Bar], y_range: (f64, f64)) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let (ylo, yhi) = y_range;
    let ymap = |y: f64| H - BOTTOM - (y - ylo) / (yhi - ylo) * (H - BOTTOM - TOP);
    axes(&mut out, "", y_label, &nice_ticks(ylo, yhi, 5), &ymap);
    let n = bars.len().max(1) as f64;
    let slot = (W - RIGHT - LEFT) / n;
    for (i, b) in bars.iter().enumerate() {
        let x = LEFT + slot * i as f64 + slot * 0.15;
        let y = ymap(b.value.clamp(ylo, yhi));
        let base = ymap(0.0f64.clamp(ylo, yhi));
        let col = if b.highlight { PALETTE[0] } else { "#9aa7b8" };
        let _ = writeln!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{col}"/>"#,
            y.min(base),
            slot * 0.7,
            (base - y).abs()
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x + slot * 0.35,
            y.min(base) - 5.0,
            fmt_num(b.value)
        );
        // Rotated so long model names do not run into each other.
        let (lx, ly) = (x + slot * 0.35, H - BOTTOM + 12.0);
        let _ = writeln!(
            out,
            r#"<text x="{lx:.1}" y="{ly}" text-anchor="end" font-size="10" transform="rotate(-25 {lx:.1} {ly})">{}</text>"#,
            esc(&b.label)
        );
    }
    let lx = W - RIGHT + 14.0;
    let _ = writeln!(
        out,
        r#"<rect x="{lx}" y="{}" width="14" height="10" fill="{}"/>"#,
        TOP + 6.0,
        PALETTE[0]
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}">this run</text>"#,
        lx + 20.0,
        TOP + 15.0
    );
    let _ = writeln!(
        out,
        r##"<rect x="{lx}" y="{}" width="14" height="10" fill="#9aa7b8"/>"##,
        TOP + 26.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}">the note</text>"#,
        lx + 20.0,
        TOP + 35.0
    );
    out.push_str("</svg>\n");
    out
}

fn fontdb() -> Arc<resvg::usvg::fontdb::Database> {
    static DB: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        db.load_system_fonts();
        Arc::new(db)
    })
    .clone()
}

/// Rasterise an SVG to PNG bytes.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    let opt = resvg::usvg::Options {
        fontdb: fontdb(),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| e.to_string())?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("empty image")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

/// Write `<name>.svg` and `<name>.png` into `dir`.
pub fn write_svg_png(dir: &Path, name: &str, svg: &str) -> Result<(), LabError> {
    let svg_path = dir.join(format!("{name}.svg"));
    std::fs::write(&svg_path, svg).map_err(LabError::io(&svg_path))?;
    let png = svg_to_png(svg).map_err(|message| LabError::Plot {
        name: name.into(),
        message,
    })?;
    let png_path = dir.join(format!("{name}.png"));
    std::fs::write(&png_path, png).map_err(LabError::io(&png_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 1.0, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            nice_ticks(-170.0, 30.0, 4),
            vec![-150.0, -100.0, -50.0, 0.0]
        );
        assert_eq!(nice_ticks(2.0, 2.0, 5), vec![2.0]);
    }

    #[test]
    fn charts_are_valid_svg_and_rasterise() {
        let c = LineChart {
            title: "flip <rate> & θ".into(),
            x_label: "θ".into(),
            y_label: "flip rate".into(),
            y_range: (0.0, 1.0),
            series: vec![Series {
                name: "ctrl".into(),
                points: vec![(1.0, 0.0), (1.3, 0.9)],
                err: Some(vec![(0.0, 0.0), (0.85, 0.95)]),
                dashed: false,
            }],
        };
        let svg = line_chart_svg(&c);
        assert!(svg.contains("flip &lt;rate&gt; &amp; θ"));
        let png = svg_to_png(&svg).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let bars = [
            Bar {
                label: "a".into(),
                value: 0.5,
                highlight: true,
            },
            Bar {
                label: "b".into(),
                value: -0.2,
                highlight: false,
            },
        ];
        let png = svg_to_png(&bar_chart_svg("t", "y", &bars, (-1.0, 1.0))).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
