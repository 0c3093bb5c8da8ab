//! The seeded fault schedule: which fault comes next, on which replica, after which gap and for
//! how long. Pure: the same seed and options give the same schedule (the run is reproducible by
//! seed up to the timing of the processes).
//!
//! The schedule opens with every applicable kind once, in a seeded order (the database restart
//! among them; the wall-clock step twice, forward and back), so even a short run meets each;
//! on a failover formation a failover comes first. After that, kinds are drawn by weight.
//! Wall-clock steps alternate in direction.

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng};

use crate::args::FaultLevel;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL a replica, restart it after `hold`.
    Kill,
    /// SIGSTOP a replica for `hold` (longer than the lease), then SIGCONT.
    Pause,
    /// `pg_terminate_backend` of `count` service connections.
    TerminateConnections,
    /// `pg_ctl restart -m fast` of the server (once per run).
    RestartDatabase,
    /// SIGTERM a replica (graceful shutdown), restart it after `hold`.
    Term,
    /// Step a replica's wall clock by `clock_step` (±10 minutes) through libfaketime's
    /// timestamp file; step it back after `hold` (its monotonic clock is left alone).
    ClockStep,
    /// SIGKILL a fence writer process (the fenced-writes workload), restart it after `hold`.
    KillFenceWriter,
    /// `pg_autoctl perform failover` on a pg_auto_failover formation (`--ha-monitor`): the
    /// standby is promoted and the primary demoted; replicas find the new primary through
    /// their multi-host URL (issue 30).
    Failover,
    /// A crash of the formation's primary node: SIGKILL of its `pg_autoctl` keeper, its
    /// postmaster and backends; the monitor promotes the standby, and the crashed node is
    /// started again `hold` after the promotion (it rejoins as the standby).
    PrimaryKill,
    /// A crash of the formation's standby node, started again after `hold`: while it is down
    /// the primary's commits wait for a synchronous standby until the monitor lets the
    /// primary go on alone.
    StandbyKill,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::TerminateConnections,
        FaultKind::RestartDatabase,
        FaultKind::Term,
        FaultKind::ClockStep,
        FaultKind::KillFenceWriter,
        FaultKind::Failover,
        FaultKind::PrimaryKill,
        FaultKind::StandbyKill,
    ];

    /// Stable name (report, JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Kill => "sigkill_restart",
            FaultKind::Pause => "sigstop_past_lease",
            FaultKind::TerminateConnections => "pg_terminate_backend",
            FaultKind::RestartDatabase => "pg_ctl_restart",
            FaultKind::Term => "sigterm_restart",
            FaultKind::ClockStep => "wall_clock_step",
            FaultKind::KillFenceWriter => "sigkill_fence_writer",
            FaultKind::Failover => "pg_failover",
            FaultKind::PrimaryKill => "pg_primary_kill",
            FaultKind::StandbyKill => "pg_standby_kill",
        }
    }
}

/// One scheduled fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledFault {
    /// What it does.
    pub kind: FaultKind,
    /// Wait before it.
    pub gap: Duration,
    /// Target replica (index), for process faults; the writer's index for
    /// [`FaultKind::KillFenceWriter`].
    pub replica: usize,
    /// Restart delay (kill, term), pause length, or how long a clock step lasts.
    pub hold: Duration,
    /// Connections to terminate.
    pub count: u32,
    /// The wall-clock step of a [`FaultKind::ClockStep`] in seconds: [`CLOCK_STEP_SECONDS`]
    /// forward or back (seeded); 0 for other kinds.
    pub clock_step: i64,
}

/// Size of a wall-clock step: 10 minutes (issue 29), far beyond any lease or deadline.
pub const CLOCK_STEP_SECONDS: i64 = 600;

/// What the schedule may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Replicas running.
    pub replicas: usize,
    /// The database is PostgreSQL (connections can be terminated).
    pub postgres: bool,
    /// The server can be restarted (`pg_ctl` and the data folder are known).
    pub restartable: bool,
    /// The replicas' lease; a pause lasts longer.
    pub lease: Duration,
    /// A replica's wall clock can be stepped (libfaketime found; PostgreSQL, whose clock the
    /// replicas judge leases and fences on, is not stepped with it — SQLite's clock is the
    /// process's own).
    pub clock_step: bool,
    /// Fence writer processes running (the fenced-writes workload); 0: none.
    pub fence_writers: usize,
    /// The database is a failover formation whose primary can be switched over.
    pub failover: bool,
}

/// Draws faults from a seed.
#[derive(Debug)]
pub struct Schedule {
    rng: StdRng,
    level: FaultLevel,
    caps: Capabilities,
    opening: VecDeque<FaultKind>,
    /// Direction of the next wall-clock step (they alternate, the first one seeded).
    step_forward: bool,
}

impl Schedule {
    /// The schedule of `seed` (the workload uses the seed itself; this draws from a derived
    /// stream).
    pub fn new(seed: u64, level: FaultLevel, caps: Capabilities) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xC4A0_5EED);
        let only_pauses = level == FaultLevel::Pauses;
        let mut opening: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|_| !only_pauses)
            .filter(|kind| match kind {
                FaultKind::Kill | FaultKind::Term => true,
                FaultKind::Pause => caps.replicas > 1,
                FaultKind::TerminateConnections => caps.postgres,
                FaultKind::RestartDatabase => caps.restartable,
                FaultKind::ClockStep => caps.clock_step,
                FaultKind::KillFenceWriter => caps.fence_writers > 0,
                FaultKind::Failover | FaultKind::PrimaryKill | FaultKind::StandbyKill => {
                    caps.failover
                }
            })
            .collect();
        // The wall clock is stepped twice in the opening: once forward and once back.
        if opening.contains(&FaultKind::ClockStep) {
            opening.push(FaultKind::ClockStep);
        }
        opening.shuffle(&mut rng);
        // On a failover formation the run opens with a failover and then a crash of the
        // primary, so that even a short run has its replicas follow both (issue 30); more are
        // drawn by weight later.
        for (place, kind) in [(0, FaultKind::Failover), (1, FaultKind::PrimaryKill)] {
            if let Some(at) = opening.iter().position(|k| *k == kind) {
                opening.remove(at);
                opening.insert(place, kind);
            }
        }
        let step_forward = rng.random_bool(0.5);
        Self {
            rng,
            level,
            caps,
            opening: opening.into(),
            step_forward,
        }
    }

    /// The next fault, or `None` at level `none`.
    pub fn next_fault(&mut self) -> Option<ScheduledFault> {
        let (min_gap, max_gap) = match self.level {
            FaultLevel::None => return None,
            FaultLevel::Default => (2_000, 6_000),
            FaultLevel::Heavy => (500, 2_000),
            FaultLevel::Pauses => (1_000, 3_000),
        };
        let gap = Duration::from_millis(self.rng.random_range(min_gap..=max_gap));
        let kind = match self.opening.pop_front() {
            Some(kind) => kind,
            None => self.draw_kind(),
        };
        let targets = if kind == FaultKind::KillFenceWriter {
            self.caps.fence_writers
        } else {
            self.caps.replicas
        };
        let replica = self.rng.random_range(0..targets.max(1));
        let lease_ms = u64::try_from(self.caps.lease.as_millis()).unwrap_or(u64::MAX);
        let hold = Duration::from_millis(match kind {
            FaultKind::Kill => self.rng.random_range(200..=4_000),
            FaultKind::Pause => lease_ms.saturating_add(self.rng.random_range(1_000..=3_000)),
            FaultKind::Term | FaultKind::KillFenceWriter => self.rng.random_range(200..=2_000),
            // At least a lease and up to three: claims, renewals and settles happen meanwhile.
            FaultKind::ClockStep => {
                lease_ms.saturating_add(self.rng.random_range(0..=lease_ms.saturating_mul(2)))
            }
            // The crashed primary comes back soon after the promotion; the standby is down
            // long enough for the monitor to notice.
            FaultKind::PrimaryKill => self.rng.random_range(0..=3_000),
            FaultKind::StandbyKill => self.rng.random_range(1_000..=8_000),
            FaultKind::TerminateConnections | FaultKind::RestartDatabase | FaultKind::Failover => 0,
        });
        let count = self.rng.random_range(1..=6);
        let clock_step = match kind {
            FaultKind::ClockStep => {
                self.step_forward = !self.step_forward;
                if self.step_forward {
                    -CLOCK_STEP_SECONDS
                } else {
                    CLOCK_STEP_SECONDS
                }
            }
            _ => 0,
        };
        Some(ScheduledFault {
            kind,
            gap,
            replica,
            hold,
            count,
            clock_step,
        })
    }

    /// A process or connection fault, by weight (the database restart only opens); pauses need
    /// a second replica to take over, connection faults need PostgreSQL.
    fn draw_kind(&mut self) -> FaultKind {
        if self.level == FaultLevel::Pauses && self.caps.replicas > 1 {
            return FaultKind::Pause;
        }
        let mut weighted: Vec<(FaultKind, u32)> =
            vec![(FaultKind::Kill, 30), (FaultKind::Term, 20)];
        if self.caps.replicas > 1 {
            weighted.push((FaultKind::Pause, 25));
        }
        if self.caps.postgres {
            weighted.push((FaultKind::TerminateConnections, 25));
        }
        if self.caps.clock_step {
            weighted.push((FaultKind::ClockStep, 15));
        }
        if self.caps.fence_writers > 0 {
            weighted.push((FaultKind::KillFenceWriter, 25));
        }
        if self.caps.failover {
            weighted.push((FaultKind::Failover, 10));
            weighted.push((FaultKind::PrimaryKill, 8));
            weighted.push((FaultKind::StandbyKill, 8));
        }
        let total: u32 = weighted.iter().map(|(_, w)| w).sum();
        let mut roll = self.rng.random_range(0..total);
        for (kind, weight) in &weighted {
            if roll < *weight {
                return *kind;
            }
            roll -= weight;
        }
        FaultKind::Kill
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(replicas: usize, postgres: bool) -> Capabilities {
        Capabilities {
            replicas,
            postgres,
            restartable: postgres,
            lease: Duration::from_secs(4),
            clock_step: postgres,
            fence_writers: if postgres { 2 } else { 0 },
            failover: postgres,
        }
    }

    fn draw(seed: u64, level: FaultLevel, caps: Capabilities, n: usize) -> Vec<ScheduledFault> {
        let mut schedule = Schedule::new(seed, level, caps);
        (0..n).filter_map(|_| schedule.next_fault()).collect()
    }

    #[test]
    fn same_seed_same_schedule() {
        let a = draw(7, FaultLevel::Default, caps(3, true), 50);
        assert_eq!(a, draw(7, FaultLevel::Default, caps(3, true), 50));
        assert_ne!(a, draw(8, FaultLevel::Default, caps(3, true), 50));
    }

    #[test]
    fn postgres_schedule_opens_with_every_kind_and_restarts_the_database_once() {
        let faults = draw(1, FaultLevel::Default, caps(3, true), 60);
        // Every kind once, the wall-clock step twice.
        let opening = FaultKind::ALL.len() + 1;
        for kind in FaultKind::ALL {
            assert!(
                faults[..opening].iter().any(|f| f.kind == kind),
                "{kind:?} missing"
            );
        }
        let other_seed = draw(2, FaultLevel::Default, caps(3, true), opening);
        assert_ne!(
            faults[..opening].iter().map(|f| f.kind).collect::<Vec<_>>(),
            other_seed.iter().map(|f| f.kind).collect::<Vec<_>>(),
            "the opening order is seeded"
        );
        let restarts = faults
            .iter()
            .filter(|f| f.kind == FaultKind::RestartDatabase)
            .count();
        assert_eq!(restarts, 1);
        for f in faults.iter().filter(|f| f.kind == FaultKind::Pause) {
            assert!(
                f.hold > Duration::from_secs(4),
                "a pause outlasts the lease"
            );
        }
        assert!(faults.iter().all(|f| f.replica < 3));
        assert!(
            faults
                .iter()
                .filter(|f| f.kind == FaultKind::KillFenceWriter)
                .all(|f| f.replica < 2),
            "a writer kill targets one of the two writers"
        );
    }

    #[test]
    fn the_opening_steps_the_clock_forward_and_back() {
        for seed in 0..20 {
            let opening = draw(
                seed,
                FaultLevel::Default,
                caps(3, true),
                FaultKind::ALL.len() + 1,
            );
            let mut steps: Vec<i64> = opening
                .iter()
                .filter(|f| f.kind == FaultKind::ClockStep)
                .map(|f| f.clock_step)
                .collect();
            steps.sort_unstable();
            assert_eq!(
                steps,
                [-CLOCK_STEP_SECONDS, CLOCK_STEP_SECONDS],
                "seed {seed}"
            );
        }
    }

    #[test]
    fn clock_steps_are_ten_minutes_either_way_and_outlast_a_lease() {
        let faults = draw(4, FaultLevel::Heavy, caps(3, true), 300);
        let steps: Vec<&ScheduledFault> = faults
            .iter()
            .filter(|f| f.kind == FaultKind::ClockStep)
            .collect();
        assert!(steps.iter().any(|f| f.clock_step == CLOCK_STEP_SECONDS));
        assert!(steps.iter().any(|f| f.clock_step == -CLOCK_STEP_SECONDS));
        for f in &steps {
            assert!(f.hold >= Duration::from_secs(4) && f.hold <= Duration::from_secs(12));
        }
        assert!(
            faults
                .iter()
                .all(|f| (f.kind == FaultKind::ClockStep) == (f.clock_step != 0))
        );
        let without = Capabilities {
            clock_step: false,
            ..caps(3, true)
        };
        assert!(
            draw(4, FaultLevel::Heavy, without, 300)
                .iter()
                .all(|f| f.kind != FaultKind::ClockStep),
            "no clock step without libfaketime"
        );
    }

    #[test]
    fn single_sqlite_replica_is_only_killed_and_terminated() {
        let faults = draw(3, FaultLevel::Heavy, caps(1, false), 60);
        assert!(!faults.is_empty());
        assert!(
            faults
                .iter()
                .all(|f| matches!(f.kind, FaultKind::Kill | FaultKind::Term) && f.replica == 0)
        );
    }

    #[test]
    fn level_pauses_only_pauses() {
        let faults = draw(5, FaultLevel::Pauses, caps(3, true), 20);
        assert_eq!(faults.len(), 20);
        assert!(faults.iter().all(|f| f.kind == FaultKind::Pause));
    }

    #[test]
    fn level_none_injects_nothing() {
        assert!(draw(1, FaultLevel::None, caps(3, true), 10).is_empty());
    }

    #[test]
    fn a_formation_run_opens_with_a_failover_and_fails_over_again_later() {
        for seed in 0..10 {
            let faults = draw(seed, FaultLevel::Default, caps(3, true), 200);
            assert_eq!(faults[0].kind, FaultKind::Failover, "seed {seed}");
            assert_eq!(faults[1].kind, FaultKind::PrimaryKill, "seed {seed}");
            assert!(
                faults.iter().any(|f| f.kind == FaultKind::StandbyKill),
                "seed {seed}: no standby crash"
            );
            let later = faults[1..]
                .iter()
                .filter(|f| f.kind == FaultKind::Failover)
                .count();
            assert!(later >= 3, "seed {seed}: {later} failovers after the first");
        }
        let without = Capabilities {
            failover: false,
            ..caps(3, true)
        };
        assert!(
            draw(1, FaultLevel::Default, without, 200)
                .iter()
                .all(|f| !matches!(
                    f.kind,
                    FaultKind::Failover | FaultKind::PrimaryKill | FaultKind::StandbyKill
                )),
            "no failover or node crash without a formation"
        );
    }
}
