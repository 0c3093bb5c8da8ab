//! The series table of docs/operations.md ("Health and metrics"), read by the metrics unit
//! tests (`crates/operator/src/metrics.rs`, through `#[path]`) and by the listener's
//! end-to-end test: one reader, so both check the same table.

/// The series table of docs/operations.md ("Health and metrics"): (name, type) per row.
pub fn documented_series() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .unwrap();
    let section = doc
        .split("## Health and metrics")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap();
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix("`tenantry_")?;
            let name = name.split(['{', '`']).next()?;
            Some((format!("tenantry_{name}"), (*cells.get(2)?).to_owned()))
        })
        .collect()
}
