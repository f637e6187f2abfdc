//! The charts, as SVG.

use std::fmt::Write as _;

use super::{ms, Report, S1, S3};

impl Report {
    /// A bar chart of `rows` (label, microseconds), one bar per row, on a logarithmic
    /// axis with a grid line per decade: the memory backend's microseconds and etcd's
    /// milliseconds both stay readable in one chart.
    pub(crate) fn bar_chart(title: &str, rows: &[(String, f64)]) -> String {
        let values = || rows.iter().map(|r| r.1).filter(|v| *v > 0.0);
        let low = values()
            .fold(f64::INFINITY, f64::min)
            .min(1e6)
            .log10()
            .floor();
        let high = values().fold(1.0, f64::max).log10().ceil().max(low + 1.0);
        let (width, bar_h, left, right) = (860.0, 22.0, 300.0, 90.0);
        let span = width - left - right;
        let x = |us: f64| left + span * ((us.max(10f64.powf(low)).log10() - low) / (high - low));
        let height = 70.0 + rows.len() as f64 * (bar_h + 8.0);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n\
             <text x=\"{left}\" y=\"{}\" fill=\"#666\">logarithmic axis: each grid line is ten times the one before</text>\n",
            escape(title),
            height - 8.0
        );
        let mut decade = low;
        while decade <= high {
            let at = x(10f64.powf(decade));
            let _ = writeln!(
                svg,
                "<line x1=\"{at:.1}\" y1=\"30\" x2=\"{at:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{at:.1}\" y=\"{:.1}\" fill=\"#666\" text-anchor=\"middle\">{}</text>",
                height - 40.0,
                height - 26.0,
                decade_label(decade)
            );
            decade += 1.0;
        }
        for (i, (label, value)) in rows.iter().enumerate() {
            let y = 35.0 + i as f64 * (bar_h + 8.0);
            let w = x(*value) - left;
            let _ = writeln!(
                svg,
                "<text x=\"10\" y=\"{}\">{}</text><rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"#4a7ab5\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                y + 15.0,
                escape(label),
                left + w + 5.0,
                y + 15.0,
                ms(*value)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    pub(crate) fn latency_chart(&self) -> String {
        let mut rows = Vec::new();
        for b in self.backends.iter().filter(|b| b.started) {
            if let Some(s) = &b.s1_client {
                rows.push((format!("{} S1 cycle p50", b.backend), s.p50_us));
                rows.push((format!("{} S1 cycle p99", b.backend), s.p99_us));
            }
            if let Some(f) = b.cycle_floor() {
                rows.push((format!("{} raw floor p50", b.backend), f.p50_us));
            }
            for p in b.peers.iter().filter(|p| p.scenario == S1) {
                rows.push((
                    format!("{} ({}) S1 cycle p50", p.peer, b.backend),
                    p.summary.p50_us,
                ));
            }
        }
        Self::bar_chart(
            "S1: acquire + release latency, against the raw floor",
            &rows,
        )
    }

    pub(crate) fn handoff_chart(&self) -> String {
        let mut rows = Vec::new();
        for b in self.backends.iter().filter(|b| b.started) {
            if let Some(s) = &b.s3_handoff {
                rows.push((format!("{} handoff p50", b.backend), s.p50_us));
                rows.push((format!("{} handoff p99", b.backend), s.p99_us));
            }
            for p in b.peers.iter().filter(|p| p.scenario == S3) {
                rows.push((
                    format!("{} ({}) handoff p50", p.peer, b.backend),
                    p.summary.p50_us,
                ));
                rows.push((
                    format!("{} ({}) handoff p99", p.peer, b.backend),
                    p.summary.p99_us,
                ));
            }
        }
        Self::bar_chart(
            "S3: release-to-acquire handoff, 16 waiters on one key",
            &rows,
        )
    }
}

/// 10^`decade` microseconds, as a grid line's label: "1 µs", "100 µs", "10 ms", "1 s".
fn decade_label(decade: f64) -> String {
    let us = 10f64.powf(decade);
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} µs")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
