//! The terminal progress bar of a workload run: settled / enqueued commands, read by polling
//! the admin API, with an optional counter shown beside it (the chaos harness's faults).
//! Shared by `tenantry-demo demo` and `tenantry-chaos`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::client::AdminClient;
use crate::workload;

/// A bar "settled / enqueued commands"; hidden when `enabled` is false (`--no-progress`).
pub fn bar(enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} commands settled{msg}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Every `every`, sets the bar's length to `enqueued` and its position to the commands of
/// `tenants` no longer open; with `faults`, shows ", N faults injected". Runs until aborted.
pub async fn track(
    client: AdminClient,
    tenants: Vec<String>,
    enqueued: Arc<AtomicU64>,
    faults: Option<Arc<AtomicU64>>,
    bar: ProgressBar,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        let total = enqueued.load(Ordering::Relaxed);
        if let Some(faults) = &faults {
            bar.set_message(format!(
                ", {} faults injected",
                faults.load(Ordering::Relaxed)
            ));
        }
        if let Ok(open) = workload::open_commands(&client, &tenants).await {
            bar.set_length(total);
            bar.set_position(total.saturating_sub(open));
        }
    }
}
