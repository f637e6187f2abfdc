//! The report: its data (`model`), the targets each backend is held to (`targets`),
//! Markdown for people (`markdown`) and SVG charts (`charts`).

mod charts;
mod markdown;
mod model;
mod targets;

pub(crate) use model::{
    BackendRun, Conformance, FloorRow, KindRow, PeerRow, Report, SweepPoint, S1, S2, S3,
};

use crate::stats::Summary;

pub(crate) fn ms(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// The CPU time per operation that both summaries carry: the server's (where it
/// reports it) and the client process's, each with how much of one core it used at
/// the rate measured. On a machine whose cores the client and the server share, these
/// tell which side a gap in throughput comes from.
pub(crate) fn cpu_work(ours: &Summary, theirs: &Summary, them: &str) -> String {
    let side = |name: &str, a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!(
            "; {name} CPU per cycle {a:.0} µs vs {b:.0} µs for {them} ({:.0}% vs {:.0}% of a core)",
            a * ours.per_sec / 1e4,
            b * theirs.per_sec / 1e4
        ),
        _ => String::new(),
    };
    side("server", ours.server_cpu_us, theirs.server_cpu_us)
        + &side("client", ours.client_cpu_us, theirs.client_cpu_us)
}

/// Writes one Markdown table: the header row (its cells separated by ` | `), its
/// rule, and each row's cells (a row that ends early leaves the rest empty).
pub(crate) fn table(md: &mut String, header: &str, rows: impl IntoIterator<Item = Vec<String>>) {
    use std::fmt::Write as _;
    let columns = header.split(" | ").count();
    let _ = writeln!(md, "| {header} |");
    let _ = writeln!(md, "|{}", " --- |".repeat(columns));
    for mut row in rows {
        row.resize(columns.max(row.len()), String::new());
        let _ = writeln!(md, "| {} |", row.join(" | "));
    }
}

pub(crate) fn opt<T>(v: &Option<T>, f: impl Fn(&T) -> String) -> String {
    v.as_ref().map_or_else(|| "—".to_owned(), f)
}
