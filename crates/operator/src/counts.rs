//! Cheap counts shared by every viewer: commands per (status, operation), failed commands by
//! error code, active fences by kind, the projected directory's row counts, the oldest pending
//! command and the lease owners at work, and the commands settled per minute with their
//! enqueue-to-settle percentiles over the last minutes (at most [`THROUGHPUT_SAMPLE`] rows), read through
//! the stores' read ports (aggregate `COUNT` queries, one statement for the fences) and kept
//! for at most [`MAX_AGE`] (one second).
//!
//! `GET /metrics` and the operator console both read one [`CountsCache`], so a console left
//! open in ten tabs under load and a scraper every few seconds cost the database at most one
//! refresh per second between them. A refresh runs under the cache's lock: viewers that ask
//! while it runs wait for it and share its answer instead of starting their own.
//! Ages are measured on the process's clock port (its monotonic reading).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_fence::RecordKind;
use tenantry_lifecycle::CommandStatus;
use tenantry_ports::clock::Clock;
use tenantry_ports::directory::ProjectionCounts;
use tenantry_ports::lifecycle::{
    CommandAdmin, CommandCount, ErrorCodeCount, LiveSummary, SettledCommand,
};
use tokio::sync::Mutex;

use crate::directory::DirectoryReads;
use crate::ports::{Fences, Store};
use tokio::time::Instant;

/// Longest time a snapshot is served before the next reader refreshes it: one second.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// Statuses counted per operation (the `tenantry_commands` gauge and the console overview).
pub const COUNTED_STATUSES: [CommandStatus; 3] = [
    CommandStatus::Pending,
    CommandStatus::Processing,
    CommandStatus::Failed,
];

/// Most error-code groups of failed commands kept (largest first).
pub const MAX_ERROR_CODES: u32 = 20;

/// Minutes of history behind the throughput chart and the latency percentiles.
pub const THROUGHPUT_MINUTES: u32 = 10;

/// How long a lease owner stays in [`Counts::recent_owners`] after it was last seen holding a
/// command: the replicas' workers at work over the last minutes, not only at this instant.
pub const OWNERS_WINDOW: Duration = Duration::from_secs(10 * 60);

/// Records `live` owners as seen at `now` in `seen`, forgets those not seen for `window`, and
/// returns the rest with when each was last seen, most recent first (then by owner).
///
/// Owners are sampled when the counts are read (by the console or `/metrics`), so an owner
/// that held commands only between two reads is not seen.
pub fn remember_owners(
    seen: &mut BTreeMap<String, DateTime<Utc>>,
    live: &[(String, u64)],
    now: DateTime<Utc>,
    window: Duration,
) -> Vec<(String, DateTime<Utc>)> {
    for (owner, _) in live {
        seen.insert(owner.clone(), now);
    }
    let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    seen.retain(|_, at| now - *at <= window);
    let mut recent: Vec<(String, DateTime<Utc>)> =
        seen.iter().map(|(o, at)| (o.clone(), *at)).collect();
    recent.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    recent
}

/// Most settled commands read for the throughput and latency (the newest); beyond it the
/// older minutes are left out and [`Throughput::truncated`] says so.
pub const THROUGHPUT_SAMPLE: u32 = 2_000;

/// Commands that succeeded over the last [`THROUGHPUT_MINUTES`] minutes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Throughput {
    /// Commands settled in each minute, oldest minute first; the last is the current one.
    pub per_minute: Vec<u64>,
    /// Median enqueue-to-settle time of those commands (`None`: none settled).
    pub p50: Option<Duration>,
    /// 99th percentile of the same.
    pub p99: Option<Duration>,
    /// Whether [`THROUGHPUT_SAMPLE`] cut the read short (older minutes then show too few).
    pub truncated: bool,
}

/// Buckets `settled` into the `minutes` minutes that end at `now` and takes the latency
/// percentiles (nearest rank).
pub fn throughput(
    settled: &[SettledCommand],
    now: DateTime<Utc>,
    minutes: u32,
    truncated: bool,
) -> Throughput {
    let mut per_minute = vec![0u64; minutes as usize];
    let mut latencies: Vec<Duration> = Vec::with_capacity(settled.len());
    for s in settled {
        let age = (now - s.completed_at).num_seconds().max(0);
        let bucket = usize::try_from(age / 60).unwrap_or(usize::MAX);
        if bucket < per_minute.len() {
            let index = per_minute.len() - 1 - bucket;
            per_minute[index] += 1;
            latencies.push((s.completed_at - s.created_at).to_std().unwrap_or_default());
        }
    }
    latencies.sort();
    let rank = |q: f64| {
        (!latencies.is_empty()).then(|| {
            let i = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
            latencies[i - 1]
        })
    };
    Throughput {
        per_minute,
        p50: rank(0.50),
        p99: rank(0.99),
        truncated,
    }
}

/// One refresh of the counts. Each part is `Err(message)` when its read failed (the others
/// still count).
#[derive(Debug, Clone)]
pub struct Counts {
    /// When it was read (the process's wall clock).
    pub at: DateTime<Utc>,
    /// Commands per (status, operation) for [`COUNTED_STATUSES`]; pairs without a command
    /// are left out.
    pub commands: Result<Vec<CommandCount>, String>,
    /// Failed commands by last error code, largest group first, at most [`MAX_ERROR_CODES`].
    pub failed_by_code: Result<Vec<ErrorCodeCount>, String>,
    /// Active fence records across bindings by kind (both kinds always present).
    pub fences: Result<BTreeMap<RecordKind, u64>, String>,
    /// Rows of the projected directory tables; `None` without a directory provider.
    pub directory: Option<Result<ProjectionCounts, String>>,
    /// The oldest pending command and the lease owners holding commands now.
    pub live: Result<LiveSummary, String>,
    /// Settled per minute and enqueue-to-settle percentiles, last [`THROUGHPUT_MINUTES`].
    pub throughput: Result<Throughput, String>,
    /// Lease owners seen holding commands within [`OWNERS_WINDOW`] by this process's reads,
    /// with when each was last seen, most recent first ([`remember_owners`]).
    pub recent_owners: Vec<(String, DateTime<Utc>)>,
}

impl Counts {
    /// Commands of `status` over all operations (0 when the read failed).
    pub fn total(&self, status: CommandStatus) -> u64 {
        self.commands.as_ref().map_or(0, |counts| {
            counts
                .iter()
                .filter(|c| c.status == status)
                .map(|c| c.count)
                .sum()
        })
    }
}

/// The shared counts of one process (see the module docs).
pub struct CountsCache {
    store: Store,
    fences: Fences,
    directory: Option<Arc<dyn DirectoryReads>>,
    clock: Arc<dyn Clock>,
    slot: Mutex<Option<(Instant, Arc<Counts>)>>,
    refreshes: AtomicU64,
    seen_owners: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
}

impl std::fmt::Debug for CountsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountsCache")
            .field("refreshes", &self.refreshes())
            .finish_non_exhaustive()
    }
}

impl CountsCache {
    /// A cache over the lifecycle store, the fence runtime (its host storage) and, when the
    /// directory is configured, the projection store; ages measured on `clock`.
    pub fn new(
        store: Store,
        fences: Fences,
        directory: Option<Arc<dyn DirectoryReads>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            fences,
            directory,
            clock,
            slot: Mutex::new(None),
            refreshes: AtomicU64::new(0),
            seen_owners: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The counts, read again only when the last snapshot is [`MAX_AGE`] old or older.
    pub async fn get(&self) -> Arc<Counts> {
        let mut slot = self.slot.lock().await;
        let now = self.clock.monotonic();
        if let Some((taken, counts)) = slot.as_ref()
            && now.saturating_duration_since(*taken) < MAX_AGE
        {
            return counts.clone();
        }
        let counts = Arc::new(self.read().await);
        *slot = Some((self.clock.monotonic(), counts.clone()));
        counts
    }

    /// How many times the counts were read from the stores (for tests and diagnostics).
    pub fn refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }

    async fn read(&self) -> Counts {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let commands = self
            .store
            .count_commands(&COUNTED_STATUSES)
            .await
            .map_err(|e| text(&e));
        let failed_by_code = self
            .store
            .count_by_error_code(CommandStatus::Failed, MAX_ERROR_CODES)
            .await
            .map_err(|e| text(&e));
        let fences = self.fences.count_fences().await.map_err(|e| text(&e));
        let directory = match &self.directory {
            Some(store) => Some(store.count_rows().await.map_err(|e| text(&e))),
            None => None,
        };
        let live = self.store.live_summary().await.map_err(|e| text(&e));
        let now = self.clock.now();
        let since = now - chrono::Duration::minutes(i64::from(THROUGHPUT_MINUTES));
        let throughput = self
            .store
            .settled_since(since, THROUGHPUT_SAMPLE)
            .await
            .map(|settled| {
                let truncated = settled.len() >= THROUGHPUT_SAMPLE as usize;
                throughput(&settled, now, THROUGHPUT_MINUTES, truncated)
            })
            .map_err(|e| text(&e));
        let recent_owners = {
            let owners = live.as_ref().map_or(&[][..], |l| l.lease_owners.as_slice());
            let mut seen = self
                .seen_owners
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            remember_owners(&mut seen, owners, now, OWNERS_WINDOW)
        };
        Counts {
            at: now,
            recent_owners,
            commands,
            failed_by_code,
            fences,
            directory,
            live,
            throughput,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use chrono::TimeZone;
    use tenantry_engine::scoped_writes::ScopedWrites;
    use tenantry_ports::clock::ManualClock;
    use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
    use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
    use tenantry_store_seaorm::testing::fresh_database;

    use super::*;

    /// Two readers within a second share one read; the next read comes once a second has
    /// passed on the clock, and sees what changed meanwhile.
    #[tokio::test]
    async fn counts_are_read_at_most_once_a_second() {
        let db = fresh_database().await;
        let manual = ManualClock::new(Utc.timestamp_opt(1_800_000_000, 0).single().unwrap());
        let clock: Arc<dyn Clock> = Arc::new(manual.clone());
        let storage = Arc::new(SeaOrmHostStorage::new(&db.db));
        let fence_storage: Arc<dyn crate::ports::FenceStorage> = storage.clone();
        let cache = CountsCache::new(
            Arc::new(SeaOrmLifecycleStore::new(&db.db)),
            ScopedWrites::with_config(
                fence_storage,
                clock.clone(),
                tenantry_engine::scoped_writes::FenceConfig::default(),
            ),
            Some(Arc::new(SeaOrmDirectoryStore::new(&db.db))),
            clock,
        );
        let first = cache.get().await;
        assert_eq!(cache.refreshes(), 1);
        assert_eq!(first.fences.as_ref().unwrap()[&RecordKind::Fence], 0);
        assert_eq!(first.directory, Some(Ok(ProjectionCounts::default())));
        // A fence appears; readers within the second still share the first read.
        let binding = tenantry_fence::Binding::parse("inst-1").unwrap();
        tenantry_ports::host_storage::HostStorage::set(
            storage.as_ref(),
            &binding,
            "ke.fence.v1.installation",
            &serde_json::json!({"reason": "lost ACK", "kind": "fence"}),
        )
        .await
        .unwrap();
        manual.advance(Duration::from_millis(999));
        let second = cache.get().await;
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.refreshes(), 1);
        manual.advance(Duration::from_millis(1));
        let third = cache.get().await;
        assert_eq!(cache.refreshes(), 2);
        assert_eq!(third.fences.as_ref().unwrap()[&RecordKind::Fence], 1);
        assert_eq!(third.live, Ok(LiveSummary::default()));
        assert_eq!(
            third.throughput.as_ref().unwrap().per_minute,
            vec![0; THROUGHPUT_MINUTES as usize]
        );
    }

    /// Owners stay for the window after they were last seen, most recent first.
    #[test]
    fn lease_owners_are_remembered_for_the_window() {
        let t0 = Utc.timestamp_opt(1_800_000_000, 0).single().unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        let window = Duration::from_secs(600);
        let mut seen = BTreeMap::new();
        let live = |owners: &[&str]| -> Vec<(String, u64)> {
            owners.iter().map(|o| ((*o).to_owned(), 1)).collect()
        };
        remember_owners(&mut seen, &live(&["a", "b"]), at(0), window);
        let recent = remember_owners(&mut seen, &live(&["b"]), at(300), window);
        assert_eq!(
            recent,
            vec![("b".to_owned(), at(300)), ("a".to_owned(), at(0))]
        );
        let recent = remember_owners(&mut seen, &[], at(600), window);
        assert_eq!(recent.len(), 2, "a was seen exactly one window ago");
        let recent = remember_owners(&mut seen, &[], at(601), window);
        assert_eq!(recent, vec![("b".to_owned(), at(300))]);
    }

    /// Settled commands fall into the minute of their completion (the last bucket is the
    /// current minute, older than the window: left out); percentiles are nearest-rank.
    #[test]
    fn throughput_buckets_by_minute_and_takes_percentiles() {
        let now = Utc.timestamp_opt(1_800_000_600, 0).single().unwrap();
        let settled = |ago_s: i64, took_s: i64| SettledCommand {
            created_at: now - chrono::Duration::seconds(ago_s + took_s),
            completed_at: now - chrono::Duration::seconds(ago_s),
        };
        let rows: Vec<SettledCommand> = (1..=100)
            .map(|i| settled(if i <= 60 { 10 } else { 70 }, i))
            .chain([settled(601, 1_000)])
            .collect();
        let t = throughput(&rows, now, 10, false);
        assert_eq!(t.per_minute.len(), 10);
        assert_eq!(t.per_minute[9], 60, "the current minute");
        assert_eq!(t.per_minute[8], 40, "the minute before");
        assert_eq!(
            t.per_minute.iter().sum::<u64>(),
            100,
            "older than 10 min: left out"
        );
        assert_eq!(t.p50, Some(Duration::from_secs(50)));
        assert_eq!(t.p99, Some(Duration::from_secs(99)));
        let empty = throughput(&[], now, 10, false);
        assert_eq!((empty.p50, empty.p99), (None, None));
    }
}
