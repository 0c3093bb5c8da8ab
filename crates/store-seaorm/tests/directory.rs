//! The directory projection store on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`):
//! the adapter's own checks (raw table dumps are byte-for-byte unchanged by a rejected input,
//! and the migration runs down and up again); the conformance suite runs in
//! tests/conformance.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, Statement};
use tenantry_directory::testing::*;
use tenantry_directory::{ApplyContext, DirectoryError, ProjectionLimits};
use tenantry_ports::directory::{ProjectionStoreError, SnapshotApplier};
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_store_seaorm::testing::fresh_database;

const TABLES: [&str; 6] = [
    "tenantry_accounts",
    "tenantry_workspaces",
    "tenantry_workspace_memberships",
    "tenantry_workspace_execution_state",
    "tenantry_directory_projection_state",
    "tenantry_directory_projection_inbox",
];

/// Every row of every directory table as text, in a stable order.
async fn raw_dump(conn: &sea_orm::DatabaseConnection) -> Vec<String> {
    let mut out = Vec::new();
    for table in TABLES {
        let rows = conn
            .query_all_raw(Statement::from_string(
                conn.get_database_backend(),
                format!("SELECT * FROM {table}"),
            ))
            .await
            .unwrap();
        let mut lines: Vec<String> = rows
            .iter()
            .map(|row| {
                let columns = row.column_names();
                let values: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        row.try_get::<Option<String>>("", c)
                            .map(|v| format!("{v:?}"))
                            .or_else(|_| {
                                row.try_get::<Option<i64>>("", c).map(|v| format!("{v:?}"))
                            })
                            .or_else(|_| {
                                row.try_get::<Option<bool>>("", c).map(|v| format!("{v:?}"))
                            })
                            .unwrap()
                    })
                    .collect();
                format!("{table}: {}", values.join(" | "))
            })
            .collect();
        lines.sort();
        out.extend(lines);
    }
    out
}

fn ctx(secs: i64) -> ApplyContext {
    ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(secs),
        max_staleness: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn rejected_snapshot_leaves_raw_tables_byte_for_byte_unchanged() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let good = snapshot(10, vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])]);
    store.apply_snapshot(&ctx(0), &good, &[]).await.unwrap();
    let before = raw_dump(&db.db.conn).await;
    assert!(before.len() > 5, "{before:?}");
    // Many rows are planned (a new workspace and accounts) before the last one is refused.
    let mut bad = snapshot(
        11,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1), ("d", 1)]),
            workspace("ws-3", 1, &[("e", 1)]),
        ],
    );
    bad.workspaces[2].created_by_account_uuid = acc_id("ghost");
    let err = store.apply_snapshot(&ctx(5), &bad, &[]).await.unwrap_err();
    assert_eq!(
        err,
        ProjectionStoreError::Rejected(DirectoryError::CreatorNotProjected {
            workspace: ws_id("ws-3"),
            creator: acc_id("ghost")
        })
    );
    assert_eq!(raw_dump(&db.db.conn).await, before);
}

/// Issue 34: a replica that stops in the middle of an apply (its apply future dropped after the
/// first membership rows were written, as on shutdown or when the process dies and its
/// connection closes) leaves the projection as it was: the apply is one transaction. The next
/// apply then takes the lock and commits.
///
/// The stop is a drop of the apply future once the first membership insert has run. The
/// statement already handed to the driver still runs, and on a loaded machine the driver can
/// answer the next statements before the future is polled again, up to its commit. So a run
/// may end all applied, never partly: each run must show the projection exactly as it was
/// before or exactly as a full apply leaves it. A run that ended all applied shows nothing
/// about a stopped apply, so the test runs again on a fresh database (at most 20 times) until
/// one stop lands before the commit.
#[tokio::test]
async fn an_apply_stopped_mid_write_leaves_the_projection_as_it_was() {
    use std::sync::Arc;

    let first = large_snapshot(10, 5);
    // Another directory: 300 new workspaces of 5 members and the first ten archived.
    let mut second = large_snapshot(310, 5);
    second.workspaces.drain(..10);
    second.cursor = 2;
    let stopped = ctx(1);
    // What a full apply of `second` leaves, on a database of its own.
    let applied = {
        let db = fresh_database().await;
        let store = SeaOrmDirectoryStore::new(&db.db);
        store.apply_snapshot(&ctx(0), &first, &[]).await.unwrap();
        store.apply_snapshot(&stopped, &second, &[]).await.unwrap();
        raw_dump(&db.db.conn).await
    };

    let mut all_applied = 0;
    let (db, store, before) = loop {
        let db = fresh_database().await;
        SeaOrmDirectoryStore::new(&db.db)
            .apply_snapshot(&ctx(0), &first, &[])
            .await
            .unwrap();
        let before = raw_dump(&db.db.conn).await;
        assert_ne!(before, applied);

        let membership_written = Arc::new(tokio::sync::Notify::new());
        let mut conn = db.db.conn.clone();
        let signal = Arc::clone(&membership_written);
        conn.set_metric_callback(move |info| {
            let sql = info.statement.sql.to_ascii_lowercase();
            if sql.starts_with("insert") && sql.contains("\"tenantry_workspace_memberships\"") {
                signal.notify_one();
            }
        });
        let store = SeaOrmDirectoryStore::new(&tenantry_store_seaorm::Database {
            conn,
            backend: db.backend(),
        });
        let stopped_mid_write = tokio::select! {
            biased;
            () = membership_written.notified() => true,
            result = store.apply_snapshot(&stopped, &second, &[]) => {
                result.unwrap();
                false
            }
        };
        // A dropped transaction is rolled back when its connection is next used: give it that
        // moment (at most 5 s). Until then no other session sees its rows; a partial commit
        // never compares equal to either dump.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut now = raw_dump(&db.db.conn).await;
        while now != before && now != applied && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            now = raw_dump(&db.db.conn).await;
        }
        if now == before {
            assert!(stopped_mid_write, "an apply that finished changed nothing");
            break (db, store, before);
        }
        assert!(
            now == applied,
            "a stopped apply left the projection partly applied: {} rows, {} before, {} applied",
            now.len(),
            before.len(),
            applied.len()
        );
        all_applied += 1;
        assert!(
            all_applied < 20,
            "the apply reached its commit before the stop in all {all_applied} runs"
        );
    };

    store.apply_snapshot(&ctx(2), &second, &[]).await.unwrap();
    let after = raw_dump(&db.db.conn).await;
    assert!(after.len() > before.len());
}

#[tokio::test]
async fn rejected_first_snapshot_leaves_no_state_row() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let mut bad = snapshot(10, vec![workspace("ws-1", 1, &[("a", 1)])]);
    bad.workspaces[0].created_by_account_uuid = acc_id("ghost");
    store.apply_snapshot(&ctx(0), &bad, &[]).await.unwrap_err();
    assert!(raw_dump(&db.db.conn).await.is_empty());
}

#[tokio::test]
async fn migration_runs_down_and_up_again() {
    use tenantry_migrations::{DirectoryMigrator, MigratorTrait};
    let db = fresh_database().await;
    DirectoryMigrator::down(&db.db.conn, None).await.unwrap();
    DirectoryMigrator::up(&db.db.conn, None).await.unwrap();
    let store = SeaOrmDirectoryStore::new(&db.db);
    store
        .apply_snapshot(
            &ctx(0),
            &snapshot(1, vec![workspace("ws-1", 1, &[("a", 1)])]),
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn accounts_are_looked_up_in_chunks_never_one_query_per_account() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tenantry_store_seaorm::directory::ACCOUNT_QUERY_CHUNK;

    let db = fresh_database().await;
    let account_selects = Arc::new(AtomicUsize::new(0));
    let mut conn = db.db.conn.clone();
    let counter = Arc::clone(&account_selects);
    conn.set_metric_callback(move |info| {
        let sql = info.statement.sql.to_ascii_lowercase();
        if sql.starts_with("select") && sql.contains("from \"tenantry_accounts\"") {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let store = SeaOrmDirectoryStore::new(&tenantry_store_seaorm::Database {
        conn,
        backend: db.backend(),
    });
    // 2 × ACCOUNT_QUERY_CHUNK + 234 distinct accounts, 10 per workspace: 3 chunks.
    let count = 2 * ACCOUNT_QUERY_CHUNK + 234;
    let names: Vec<String> = (0..count).map(|i| format!("acc{i:05}")).collect();
    let workspaces = |revision: i64| -> Vec<_> {
        names
            .chunks(10)
            .enumerate()
            .map(|(i, chunk)| {
                let pairs: Vec<(&str, i64)> = chunk.iter().map(|n| (n.as_str(), 1)).collect();
                workspace(&format!("ws-{i:04}"), revision, &pairs)
            })
            .collect()
    };
    let big = snapshot(10, workspaces(1));
    // Into empty tables nothing is looked up: one read of at most one row finds them empty.
    store.apply_snapshot(&ctx(0), &big, &[]).await.unwrap();
    assert_eq!(account_selects.load(Ordering::SeqCst), 1);
    // The same snapshot again is already projected: no row is read.
    store.apply_snapshot(&ctx(1), &big, &[]).await.unwrap();
    assert_eq!(account_selects.load(Ordering::SeqCst), 1);
    // Another snapshot is planned against the stored rows (the emptiness check, then the
    // accounts in 3 chunks).
    let mut renamed = snapshot(11, workspaces(1));
    renamed.workspaces[0].name = "renamed".into();
    renamed.workspaces[0].projection_revision = 2;
    store.apply_snapshot(&ctx(2), &renamed, &[]).await.unwrap();
    assert_eq!(account_selects.load(Ordering::SeqCst), 5);
}

/// Installs triggers that count every row inserted, updated or deleted in the four projected
/// tables (an `INSERT .. ON CONFLICT DO UPDATE` of an existing row counts as an update);
/// `row_writes` reads the count.
async fn count_row_writes(db: &tenantry_store_seaorm::testing::TestDatabase) {
    let conn = &db.db.conn;
    conn.execute_unprepared("CREATE TABLE test_row_writes (n BIGINT NOT NULL)")
        .await
        .unwrap();
    conn.execute_unprepared("INSERT INTO test_row_writes VALUES (0)")
        .await
        .unwrap();
    let postgres = db.backend() == tenantry_store_seaorm::Backend::Postgres;
    if postgres {
        conn.execute_unprepared(
            "CREATE FUNCTION test_count_write() RETURNS trigger AS $$ BEGIN \
             UPDATE test_row_writes SET n = n + 1; RETURN NULL; END $$ LANGUAGE plpgsql",
        )
        .await
        .unwrap();
    }
    for table in &TABLES[..4] {
        if postgres {
            conn.execute_unprepared(&format!(
                "CREATE TRIGGER count_{table} AFTER INSERT OR UPDATE OR DELETE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION test_count_write()"
            ))
            .await
            .unwrap();
        } else {
            for op in ["INSERT", "UPDATE", "DELETE"] {
                conn.execute_unprepared(&format!(
                    "CREATE TRIGGER count_{op}_{table} AFTER {op} ON {table} \
                     BEGIN UPDATE test_row_writes SET n = n + 1; END"
                ))
                .await
                .unwrap();
            }
        }
    }
}

async fn row_writes(db: &tenantry_store_seaorm::testing::TestDatabase) -> i64 {
    let row = db
        .db
        .conn
        .query_one_raw(Statement::from_string(
            db.db.conn.get_database_backend(),
            "SELECT n FROM test_row_writes",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

/// Issue 34: re-applying an unchanged snapshot writes no projected row (counted by triggers in
/// the database, not by the store), and a snapshot that changes one workspace writes that
/// workspace's rows only.
#[tokio::test]
async fn reapplying_an_unchanged_snapshot_writes_no_row() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    count_row_writes(&db).await;
    let s = large_snapshot(20, 5);
    store.apply_snapshot(&ctx(0), &s, &[]).await.unwrap();
    // 100 accounts, 20 workspaces, 100 memberships, 20 execution rows.
    assert_eq!(row_writes(&db).await, 240);

    // The same snapshot (same cursor): nothing.
    store.apply_snapshot(&ctx(1), &s, &[]).await.unwrap();
    assert_eq!(row_writes(&db).await, 240);

    // The same contents at a later cursor (planned against the stored rows): nothing.
    let mut later = s.clone();
    later.cursor = 2;
    store.apply_snapshot(&ctx(2), &later, &[]).await.unwrap();
    assert_eq!(row_writes(&db).await, 240);

    // One workspace renamed at a new revision: its row and its execution-state row (which
    // records the revision as `desired_state_revision`) only.
    let mut renamed = later.clone();
    renamed.cursor = 3;
    renamed.workspaces[7].name = "renamed".into();
    renamed.workspaces[7].projection_revision = 2;
    store.apply_snapshot(&ctx(3), &renamed, &[]).await.unwrap();
    assert_eq!(row_writes(&db).await, 242);
    let state =
        tenantry_ports::directory::ProjectionStateReader::projection_state(&store, &instance())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(state.cursor, 3);
}

/// A snapshot of `workspaces` workspaces with `members` members each (distinct accounts).
fn large_snapshot(workspaces: usize, members: usize) -> tenantry_directory::DirectorySnapshot {
    let accounts: Vec<String> = (0..workspaces * members)
        .map(|i| format!("acc-{i:06}"))
        .collect();
    let list: Vec<_> = (0..workspaces)
        .map(|w| {
            let own: Vec<(&str, i64)> = accounts[w * members..(w + 1) * members]
                .iter()
                .map(|a| (a.as_str(), 1))
                .collect();
            workspace(&format!("ws-{w:04}"), 1, &own)
        })
        .collect();
    snapshot(1, list)
}

/// The planner's CPU work does not stall the runtime: on a multi-threaded runtime (the
/// service's) a ticker task keeps ticking while a large snapshot is planned (the planner runs
/// in `block_in_place`, which moves the worker's other tasks to another thread). A regression
/// guard only: with SQLite the apply's task already moves between threads, so planning inline
/// on the worker does not fail this test either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_a_large_snapshot_does_not_stall_the_runtime() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let ctx = ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(0),
        max_staleness: Duration::from_secs(60),
    };
    let s = large_snapshot(100, 200);
    // The planner's own time for this input (pure, on this thread, nothing else to do).
    let started = std::time::Instant::now();
    let keys = tenantry_directory::plan::snapshot_keys(&s, &[]);
    let planned = tenantry_directory::plan::plan_snapshot(
        &ctx,
        None,
        &tenantry_directory::ExistingRows::default(),
        &s,
        &[],
    )
    .unwrap();
    let plan_time = started.elapsed();
    assert_eq!(planned.memberships.len(), 20_000);
    assert_eq!(keys.account_uuids.len(), 20_000);

    let ticks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let ticker = {
        let ticks = std::sync::Arc::clone(&ticks);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                ticks.lock().unwrap().push(std::time::Instant::now());
            }
        })
    };
    tokio::task::yield_now().await;
    let apply_started = std::time::Instant::now();
    // On the worker (not the test's own thread), where the ticker runs too.
    tokio::spawn(async move { store.apply_snapshot(&ctx, &s, &[]).await.unwrap() })
        .await
        .unwrap();
    let apply_time = apply_started.elapsed();
    ticker.abort();
    let ticks = ticks.lock().unwrap().clone();
    let max_gap = ticks
        .windows(2)
        .filter(|w| w[1] >= apply_started)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(apply_time);
    eprintln!(
        "20,000 memberships: planner alone {plan_time:?}; apply {apply_time:?}; longest runtime stall during the apply {max_gap:?} ({} ticks)",
        ticks.len()
    );
    assert!(
        max_gap < plan_time / 2,
        "the runtime stalled {max_gap:?}; planning takes {plan_time:?}"
    );
}

/// A snapshot held as several pages (what a spooled paged snapshot serves). Page
/// `unreadable_again` (if any) can be read once (by the survey) but not read back: a spool file
/// gone bad between the two passes.
struct Pages {
    cursor: i64,
    pages: Vec<Vec<tenantry_directory::DirectoryWorkspace>>,
    unreadable_again: Option<usize>,
    reads: std::sync::atomic::AtomicUsize,
}

impl Pages {
    fn new(cursor: i64, pages: Vec<Vec<tenantry_directory::DirectoryWorkspace>>) -> Self {
        Self {
            cursor,
            pages,
            unreadable_again: None,
            reads: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The same pages, page `index` failing on its second read.
    fn unreadable_again(mut self, index: usize) -> Self {
        self.unreadable_again = Some(index);
        self
    }

    /// How many times the unreadable page was read (0 when no page is).
    fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl tenantry_ports::directory::SnapshotSource for Pages {
    fn instance_uuid(&self) -> &tenantry_directory::InstanceUuid {
        static INSTANCE: std::sync::OnceLock<tenantry_directory::InstanceUuid> =
            std::sync::OnceLock::new();
        INSTANCE.get_or_init(instance)
    }

    fn cursor(&self) -> i64 {
        self.cursor
    }

    fn page_count(&self) -> usize {
        self.pages.len()
    }

    fn read_page(
        &self,
        index: usize,
    ) -> Result<
        std::borrow::Cow<'_, [tenantry_directory::DirectoryWorkspace]>,
        tenantry_ports::directory::SnapshotReadError,
    > {
        if self.unreadable_again == Some(index)
            && self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0
        {
            return Err(tenantry_ports::directory::SnapshotReadError {
                page: index,
                message: "the spooled page is truncated".into(),
            });
        }
        Ok(std::borrow::Cow::Owned(self.pages[index].clone()))
    }
}

/// A snapshot read from a source of several pages (pages of the source, and pages of the
/// store within them) leaves the same tables as the whole snapshot applied to the reference
/// store, including an email that moves from one account to another across source pages.
#[tokio::test]
async fn a_snapshot_source_of_several_pages_equals_the_whole_snapshot() {
    use tenantry_ports::directory::{ProjectionTablesReader, SnapshotApplier};
    let first = snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1)]),
            workspace("ws-3", 1, &[("d", 1)]),
        ],
    );
    let mut second = snapshot(
        11,
        vec![
            workspace("ws-1", 2, &[("a", 2)]),
            workspace("ws-3", 2, &[("d", 2), ("e", 2)]),
            workspace("ws-4", 2, &[("b", 2)]),
        ],
    );
    // a takes a new email; e (new, a later page) must not take a's old one: refused.
    second.workspaces[0].members[0].normalized_email = "new-a@example.com".into();
    second.workspaces[1].members[1].normalized_email = "a@example.com".into();
    // The same change without the claimant of a's old email applies.
    let mut third = second.clone();
    third.cursor = 12;
    third.workspaces[1].members[1].normalized_email = "e@example.com".into();
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db).with_snapshot_page(1);
    let mut reference = tenantry_directory::ProjectionTables::default();
    let mut refused = 0;
    for s in [&first, &second, &third] {
        let source = Pages::new(
            s.cursor,
            vec![s.workspaces[..1].to_vec(), s.workspaces[1..].to_vec()],
        );
        let expected = reference.apply_snapshot(&ctx(s.cursor), s, &[]);
        let applied = store
            .apply_snapshot_source(&ctx(s.cursor), &source, &[])
            .await;
        match (&expected, &applied) {
            (Ok(expected), Ok(applied)) => assert_eq!(applied, expected),
            (Err(expected), Err(ProjectionStoreError::Rejected(applied))) => {
                assert!(matches!(applied, DirectoryError::EmailCollision { .. }));
                assert_eq!(applied, expected);
                refused += 1;
            }
            _ => panic!("reference {expected:?}, store {applied:?}"),
        }
        let tables = store.read_tables().await.unwrap();
        assert_eq!(tables, reference, "cursor {}", s.cursor);
    }
    assert_eq!(refused, 1);
    assert_eq!(
        reference.accounts[&acc_id("a")].normalized_email,
        "new-a@example.com"
    );
}

/// A first projection (empty tables) looks nothing up. The tables it leaves equal the
/// reference's, an account met on several pages included; a rule broken on a later page, or
/// a page that cannot be read back, leaves the tables empty however many pages were written.
#[tokio::test]
async fn a_first_projection_without_lookups_equals_the_reference() {
    use tenantry_ports::directory::{ProjectionTablesReader, SnapshotApplier};
    let workspaces: Vec<_> = (0..12)
        .map(|i| {
            // Account "shared" is a member on every page; the others are per workspace.
            let own = format!("own-{i}");
            workspace(
                &format!("ws-{i:02}"),
                1,
                &[(own.as_str(), 1), ("shared", 1)],
            )
        })
        .collect();
    let pages_of = |workspaces: &[tenantry_directory::DirectoryWorkspace]| {
        Pages::new(10, workspaces.chunks(5).map(<[_]>::to_vec).collect())
    };

    // A later page names an email that an earlier page gave another account: refused.
    let mut clashing = workspaces.clone();
    clashing[11].members[0].normalized_email = "own-0@example.com".into();
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db).with_snapshot_page(2);
    let refused = store
        .apply_snapshot_source(&ctx(10), &pages_of(&clashing), &[])
        .await;
    assert!(
        matches!(
            refused,
            Err(ProjectionStoreError::Rejected(
                DirectoryError::EmailMapsToSeveralAccounts { .. }
            ))
        ),
        "{refused:?}"
    );
    assert!(raw_dump(&db.db.conn).await.is_empty());

    // A page that cannot be read back after two were written: a storage error, nothing kept.
    let broken = pages_of(&workspaces).unreadable_again(2);
    let failed = store.apply_snapshot_source(&ctx(10), &broken, &[]).await;
    assert!(
        matches!(failed, Err(ProjectionStoreError::Storage(_))),
        "{failed:?}"
    );
    assert_eq!(broken.reads(), 2);
    assert!(raw_dump(&db.db.conn).await.is_empty());

    let whole = snapshot(10, workspaces.clone());
    let mut reference = tenantry_directory::ProjectionTables::default();
    let expected = reference.apply_snapshot(&ctx(10), &whole, &[]).unwrap();
    let applied = store
        .apply_snapshot_source(&ctx(10), &pages_of(&workspaces), &[])
        .await
        .unwrap();
    assert_eq!(applied, expected);
    assert_eq!(store.read_tables().await.unwrap(), reference);
    assert_eq!(reference.memberships.len(), 24);
}

/// On PostgreSQL the phases of an apply that write plan their statements their own way: a
/// page's membership writes may use generic plans (`plan_cache_mode = auto`) with index scans
/// preferred, and the last step (its lookups, the state row) plans each statement for its values
/// with sequential scans allowed again. Statement-level triggers record the settings each write
/// ran under, for a first projection and for a later snapshot planned against stored rows. A
/// page's lookups write nothing, so their settings are not observed here (the bench measures
/// them). Nothing to check on SQLite.
#[tokio::test]
async fn each_phase_of_an_apply_is_planned_its_own_way() {
    let db = fresh_database().await;
    if db.backend() != tenantry_store_seaorm::Backend::Postgres {
        return;
    }
    let conn = &db.db.conn;
    for sql in [
        "CREATE TABLE test_plan_settings (seq BIGSERIAL, tbl TEXT, plans TEXT, seqscan TEXT)",
        "CREATE FUNCTION test_record_plan_settings() RETURNS trigger AS $$ BEGIN \
         INSERT INTO test_plan_settings (tbl, plans, seqscan) VALUES (TG_TABLE_NAME, \
         current_setting('plan_cache_mode'), current_setting('enable_seqscan')); \
         RETURN NULL; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER record_memberships AFTER INSERT OR UPDATE \
         ON tenantry_workspace_memberships \
         FOR EACH STATEMENT EXECUTE FUNCTION test_record_plan_settings()",
        "CREATE TRIGGER record_state AFTER INSERT OR UPDATE \
         ON tenantry_directory_projection_state \
         FOR EACH STATEMENT EXECUTE FUNCTION test_record_plan_settings()",
    ] {
        conn.execute_unprepared(sql).await.unwrap();
    }
    let recorded = || async {
        let rows = conn
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT tbl, plans, seqscan FROM test_plan_settings ORDER BY seq",
            ))
            .await
            .unwrap();
        conn.execute_unprepared("DELETE FROM test_plan_settings")
            .await
            .unwrap();
        rows.iter()
            .map(|row| {
                let get = |column: &str| row.try_get::<String>("", column).unwrap();
                (get("tbl"), get("plans"), get("seqscan"))
            })
            .collect::<Vec<_>>()
    };
    let check = |rows: Vec<(String, String, String)>| {
        let memberships: Vec<_> = rows
            .iter()
            .filter(|(table, ..)| table == "tenantry_workspace_memberships")
            .collect();
        assert!(memberships.len() >= 3, "{rows:?}");
        for (_, plans, seqscan) in &memberships {
            assert_eq!(
                (plans.as_str(), seqscan.as_str()),
                ("auto", "off"),
                "{rows:?}"
            );
        }
        let last = rows.last().unwrap();
        assert_eq!(last.0, "tenantry_directory_projection_state", "{rows:?}");
        assert_eq!(
            (last.1.as_str(), last.2.as_str()),
            ("force_custom_plan", "on")
        );
    };
    let store = SeaOrmDirectoryStore::new(&db.db).with_snapshot_page(200);
    let first = large_snapshot(6, 100);
    store.apply_snapshot(&ctx(0), &first, &[]).await.unwrap();
    check(recorded().await);
    // A later snapshot with every membership changed: each page looks up its stored rows, then
    // writes.
    let mut later = large_snapshot(6, 100);
    later.cursor = first.cursor + 1;
    for workspace in &mut later.workspaces {
        workspace.projection_revision += 1;
        for member in &mut workspace.members {
            member.projection_revision += 1;
        }
    }
    store.apply_snapshot(&ctx(1), &later, &[]).await.unwrap();
    check(recorded().await);
}
