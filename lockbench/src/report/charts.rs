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

impl Report {
    /// The S2 sweep as lines: cycles per second (logarithmic) against concurrent tasks,
    /// a colour of its own per backend; distlock solid, the raw floor dashed, rslock
    /// dotted.
    pub(crate) fn sweep_chart(&self) -> String {
        // One colour for each row lockbench can run (`--backends`' twelve), so no two
        // backends share one.
        const COLOURS: [&str; 12] = [
            "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#000080", "#00a087",
        ];
        let (width, height, left, top, bottom, right) = (860.0, 460.0, 80.0, 40.0, 90.0, 200.0);
        let points: Vec<f64> = self
            .backends
            .iter()
            .flat_map(|b| &b.sweep)
            .flat_map(|p| [p.client, p.floor, p.rslock])
            .flatten()
            .filter(|r| *r > 0.0)
            .collect();
        let low = points
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .min(1e6)
            .log10()
            .floor();
        let high = points
            .iter()
            .copied()
            .fold(1.0, f64::max)
            .log10()
            .ceil()
            .max(low + 1.0);
        let steps = crate::scenarios::SWEEP.len().max(2) - 1;
        let x = |i: usize| left + (width - left - right) * i as f64 / steps as f64;
        let y =
            |rate: f64| top + (height - top - bottom) * (1.0 - (rate.log10() - low) / (high - low));
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">S2 sweep: cycles per second against concurrent tasks (logarithmic axis)</text>\n"
        );
        let mut decade = low;
        while decade <= high {
            let at = y(10f64.powf(decade));
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" y1=\"{at:.1}\" x2=\"{:.1}\" y2=\"{at:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#666\" text-anchor=\"end\">{}/s</text>",
                width - right,
                left - 6.0,
                at + 4.0,
                10f64.powf(decade)
            );
            decade += 1.0;
        }
        for (i, tasks) in crate::scenarios::SWEEP.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#666\" text-anchor=\"middle\">{tasks}</text>",
                x(i),
                height - bottom + 18.0
            );
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#666\" text-anchor=\"middle\">concurrent tasks on one client</text>",
            (left + width - right) / 2.0,
            height - bottom + 38.0
        );
        let mut legend = 0;
        for (n, b) in self
            .backends
            .iter()
            .filter(|b| !b.sweep.is_empty())
            .enumerate()
        {
            let colour = COLOURS[n % COLOURS.len()];
            let series: [(&str, &str, Pick); 3] = [
                ("distlock", "", |p| p.client),
                ("raw floor", " stroke-dasharray=\"6 4\"", |p| p.floor),
                ("rslock", " stroke-dasharray=\"2 3\"", |p| p.rslock),
            ];
            for (what, dash, pick) in series {
                let line: Vec<String> = b
                    .sweep
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| {
                        pick(p)
                            .filter(|r| *r > 0.0)
                            .map(|r| format!("{:.1},{:.1}", x(i), y(r)))
                    })
                    .collect();
                if line.is_empty() {
                    continue;
                }
                let _ = writeln!(
                    svg,
                    "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>",
                    line.join(" ")
                );
                let ly = top + 16.0 * legend as f64;
                let _ = writeln!(
                    svg,
                    "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    width - right + 10.0,
                    width - right + 40.0,
                    width - right + 46.0,
                    ly + 4.0,
                    escape(&format!("{} {what}", b.backend))
                );
                legend += 1;
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Which rate of a sweep point a line draws.
type Pick = fn(&super::SweepPoint) -> Option<f64>;

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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::{BackendRun, Report, SweepPoint};

    /// Every row lockbench can run, each with a sweep: the legend tells each backend
    /// by its colour, and each series of one backend by its dash.
    #[test]
    fn every_backend_in_the_sweep_has_a_colour_of_its_own() {
        let point = SweepPoint {
            tasks: 1,
            client: Some(100.0),
            floor: Some(200.0),
            rslock: None,
        };
        let backends = (0..12)
            .map(|n| BackendRun {
                backend: format!("row{n}"),
                started: true,
                sweep: vec![point, point],
                ..Default::default()
            })
            .collect();
        let svg = Report {
            mode: "quick".into(),
            unix_time: 0,
            cpus: 2,
            backends,
        }
        .sweep_chart();
        let mut styles = HashSet::new();
        let mut colours = HashSet::new();
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let stroke = line.split("stroke=\"").nth(1).expect("a stroke");
            let colour = &stroke[..7];
            let dash = line.contains("stroke-dasharray");
            assert!(styles.insert((colour.to_owned(), dash)), "{line}");
            colours.insert(colour.to_owned());
        }
        assert_eq!(styles.len(), 24, "{svg}");
        assert_eq!(colours.len(), 12, "{svg}");
    }
}
