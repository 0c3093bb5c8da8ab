//! Part `fairness` (issue 33): the table of docs/benchmarks.md, section 10, and its targets.
//!
//! The bench binary prints three lines (`run`: `alone`, `backlog`, `reference`; see
//! `crates/bench/src/fairness.rs`). Targets: the other tenant's p99 enqueue-to-settle during the
//! backlog's drain ≤ 2 × its p99 on an empty outbox, and the backlog's commands per second with
//! the other tenant within 10 % of the reference (the same backlog alone).

use std::fmt::Write as _;

use serde_json::Value;

/// The other tenant's p99 during the backlog at most this many times its p99 alone.
const P99_FACTOR: f64 = 2.0;
/// The backlog's throughput with the other tenant within this share of the reference.
const THROUGHPUT_SHARE: f64 = 0.10;

fn runs<'a>(results: &'a [Value], backend: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    results.iter().filter(move |r| {
        r.get("part").and_then(Value::as_str) == Some("fairness") && r["backend"] == backend
    })
}

fn run<'a>(results: &'a [Value], backend: &'a str, name: &str) -> Option<&'a Value> {
    runs(results, backend).find(|r| r["run"] == name)
}

/// Section 10: one row per run and backend; empty when the part did not run.
pub fn section(results: &[Value]) -> String {
    let rows: Vec<&Value> = results
        .iter()
        .filter(|r| r.get("part").and_then(Value::as_str) == Some("fairness"))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "### 10. Fairness across tenants\n\n| backend | run | backlog | other tenant's commands | \
         backlog commands/s | other tenant p50 ms | p99 ms | max ms | enqueue → claim p50 ms | \
         p99 ms |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            super::report::s(&r["backend"]),
            super::report::s(&r["run"]),
            r["backlog"],
            r["others"],
            r["backlog_per_second"],
            r["others_p50_ms"],
            r["others_p99_ms"],
            r["others_max_ms"],
            r["others_to_claim_p50_ms"],
            r["others_to_claim_p99_ms"],
        );
    }
    md.push('\n');
    md
}

/// The two targets per backend that ran all three runs: (target, this run, met).
pub fn targets(results: &[Value]) -> Vec<(String, String, Option<bool>)> {
    let mut rows = Vec::new();
    for backend in ["postgres", "sqlite"] {
        let (Some(alone), Some(backlog), Some(reference)) = (
            run(results, backend, "alone"),
            run(results, backend, "backlog"),
            run(results, backend, "reference"),
        ) else {
            continue;
        };
        if let (Some(quiet), Some(busy)) = (
            alone["others_p99_ms"].as_f64(),
            backlog["others_p99_ms"].as_f64(),
        ) {
            rows.push((
                format!(
                    "fairness ({backend}): another tenant's p99 enqueue → settle during a \
                     backlog of {} ≤ {P99_FACTOR} × its p99 on an empty outbox",
                    backlog["backlog"]
                ),
                format!(
                    "{} ms vs {} ms ({:.1}×)",
                    backlog["others_p99_ms"],
                    alone["others_p99_ms"],
                    busy / quiet
                ),
                Some(busy <= P99_FACTOR * quiet),
            ));
        }
        if let (Some(fair), Some(alone)) = (
            backlog["backlog_per_second"].as_f64(),
            reference["backlog_per_second"].as_f64(),
        ) {
            let change = fair / alone - 1.0;
            rows.push((
                format!(
                    "fairness ({backend}): the backlog's commands/s within 10 % of the backlog alone"
                ),
                format!("{fair:.0} vs {alone:.0} ({:+.1} %)", change * 100.0),
                Some(change.abs() <= THROUGHPUT_SHARE),
            ));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(run: &str, backlog: u64, per_second: Option<f64>, p99: Option<f64>) -> Value {
        json!({"part": "fairness", "backend": "postgres", "run": run, "backlog": backlog,
               "others": 100, "backlog_per_second": per_second, "others_p50_ms": 1.0,
               "others_p99_ms": p99, "others_max_ms": 9.0, "others_to_claim_p50_ms": 0.5,
               "others_to_claim_p99_ms": 1.0})
    }

    #[test]
    fn each_run_has_a_row_and_the_targets_compare_the_runs() {
        let results = vec![
            line("alone", 0, None, Some(4.0)),
            line("backlog", 100_000, Some(14_000.0), Some(30.0)),
            line("reference", 100_000, Some(15_000.0), None),
        ];
        let md = section(&results);
        assert!(
            md.contains("| postgres | backlog | 100000 | 100 | 14000.0 | 1.0 | 30.0 | 9.0 |"),
            "{md}"
        );
        let targets = targets(&results);
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].1, "30.0 ms vs 4.0 ms (7.5×)");
        assert_eq!(targets[0].2, Some(false));
        assert_eq!(targets[1].1, "14000 vs 15000 (-6.7 %)");
        assert_eq!(targets[1].2, Some(true));
    }

    #[test]
    fn a_missing_run_gives_no_target() {
        let results = vec![line("alone", 0, None, Some(4.0))];
        assert!(targets(&results).is_empty());
        assert!(section(&[]).is_empty());
    }
}
