//! The fault loop's actions on the harness: kill, stop, pause and restart replicas, fault
//! the database or the formation, step a replica's wall clock and step it back.

use std::collections::BTreeSet;
use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use tenantry_demo::client::AdminClient;
use tenantry_demo::workload::{self, Plan};
use tokio::time::Instant;

use super::{CLOCK_REREAD, Harness, LEASE, SHUTDOWN_GRACE, START_LIMIT};
use crate::checks::{self, ClockStepRecord, PauseRecord};
use crate::replica::{self};
use crate::report::FaultEvent;
use crate::schedule::{FaultKind, ScheduledFault};

impl Harness {
    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn event(&mut self, kind: FaultKind, replica: Option<usize>, detail: String) {
        let at = self.elapsed();
        self.events.push(FaultEvent {
            at,
            kind: kind.as_str(),
            replica,
            detail,
        });
    }

    /// Notes replicas that exited by themselves (a crash) and restarts them.
    pub(super) fn reap_crashes(&mut self) {
        for r in &mut self.replicas {
            if let Some(status) = r.exited() {
                self.unexpected_exits.push(format!(
                    "replica {} generation {} exited by itself ({status})",
                    r.index, r.generation
                ));
                if r.spawn().is_ok() {
                    self.restarts += 1;
                }
            }
        }
    }

    /// A client of one running replica other than `not` (for reads while `not` is stopped).
    fn other_client(&self, not: usize) -> Option<AdminClient> {
        let other = self
            .replicas
            .iter()
            .find(|r| r.index != not && r.running())?;
        AdminClient::replicas(vec![other.base()], &self.token, 20, Duration::from_secs(10)).ok()
    }

    pub(super) async fn apply(&mut self, fault: ScheduledFault, plan: &Plan) {
        let i = fault.replica;
        match fault.kind {
            FaultKind::Kill | FaultKind::Term => {
                let r = &mut self.replicas[i];
                let detail = if fault.kind == FaultKind::Kill {
                    r.kill().await;
                    format!("SIGKILL, restart after {} ms", fault.hold.as_millis())
                } else {
                    let (graceful, status) = r.terminate(SHUTDOWN_GRACE * 2).await;
                    format!(
                        "SIGTERM ({}: {status}), restart after {} ms",
                        if graceful { "exited" } else { "killed" },
                        fault.hold.as_millis()
                    )
                };
                tokio::time::sleep(fault.hold).await;
                let restarted = match r.spawn() {
                    Ok(()) => r.wait_for("/healthz", START_LIMIT).await,
                    Err(e) => Err(e),
                };
                self.restarts += 1;
                let detail = match restarted {
                    Ok(()) => detail,
                    Err(e) => format!("{detail}; restart: {e}"),
                };
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::Pause => {
                // A database fault can strand a claim whose answer was lost (the replica never
                // learns it holds the command): let such leases expire and be taken over
                // before a pause, so every command the paused replica holds is one it works on.
                if let Some(at) = self.last_database_fault {
                    tokio::time::sleep_until(at + LEASE * 2).await;
                }
                let detail = match self.pause(i, fault.hold, plan).await {
                    Ok(record) => {
                        let d = format!(
                            "SIGSTOP for {} ms holding {} command(s), {} taken over",
                            fault.hold.as_millis(),
                            record.held,
                            record.taken_over.len()
                        );
                        self.pauses.push(record);
                        d
                    }
                    Err(e) => format!("pause not measured: {e}"),
                };
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::TerminateConnections => {
                let detail = match self.db.pg() {
                    Some(pg) => match pg.terminate_connections(fault.count).await {
                        Ok(n) => format!("{n} of up to {} connections terminated", fault.count),
                        Err(e) => format!("failed: {e}"),
                    },
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
            FaultKind::KillFenceWriter => {
                let owner = self.writers.kill(i).await;
                tokio::time::sleep(fault.hold).await;
                let restarted = self.writers.spawn(i);
                let detail = format!(
                    "SIGKILL {}, restart after {} ms{}",
                    owner.as_deref().unwrap_or("(not running)"),
                    fault.hold.as_millis(),
                    restarted
                        .err()
                        .map(|e| format!("; restart: {e}"))
                        .unwrap_or_default()
                );
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::ClockStep => {
                let detail = self.step_clock(i, fault.clock_step, fault.hold).await;
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::Failover | FaultKind::PrimaryKill | FaultKind::StandbyKill => {
                let detail = match self.db.pg().cloned() {
                    Some(pg) => self.formation_fault(&pg, fault).await,
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
            FaultKind::RestartDatabase => {
                let started = Instant::now();
                let detail = match self.db.pg() {
                    Some(pg) => match pg.restart().await {
                        Ok(()) => format!("server back after {} ms", started.elapsed().as_millis()),
                        Err(e) => format!("failed: {e}"),
                    },
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
        }
    }

    /// A fault of the failover formation, once it has one primary and one standby: a
    /// failover, a crash of the primary (the monitor promotes the standby; the crashed node is
    /// started again `hold` later) or of the standby (started again after `hold`). After a
    /// move of the primary, the new primary's outbox is checked for every command
    /// acknowledged before the fault began. Returns the event's detail.
    async fn formation_fault(&mut self, pg: &crate::pg::Postgres, fault: ScheduledFault) -> String {
        let (primary, standby) = match pg.wait_healthy().await {
            Ok(nodes) => nodes,
            Err(e) => {
                if fault.kind != FaultKind::StandbyKill {
                    self.failovers.push(checks::FailoverRecord {
                        cause: fault.kind.as_str(),
                        outcome: Err(e.clone()),
                        acknowledged: 0,
                        missing: Ok(Vec::new()),
                    });
                }
                return format!("not injected: {e}");
            }
        };
        let acknowledged: Vec<String> = self
            .acknowledged
            .snapshot()
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let started = Instant::now();
        let outcome = match fault.kind {
            FaultKind::Failover => pg.failover().await,
            FaultKind::PrimaryKill => match pg.crash_node(&primary.name).await {
                Ok(_) => {
                    let promoted = pg.wait_promoted(&primary.name).await;
                    tokio::time::sleep(fault.hold).await;
                    let back = pg.restart_node(&primary.name);
                    promoted.and_then(|new| {
                        back.map(|()| (primary.port.to_string(), new.port.to_string()))
                    })
                }
                Err(e) => Err(e),
            },
            _ => {
                let crashed = pg.crash_node(&standby.name).await;
                tokio::time::sleep(fault.hold).await;
                let back = pg.restart_node(&standby.name);
                return match crashed.and(back) {
                    Ok(()) => format!(
                        "standby {} (port {}) crashed, started again after {} ms",
                        standby.name,
                        standby.port,
                        fault.hold.as_millis()
                    ),
                    Err(e) => format!("failed: {e}"),
                };
            }
        };
        let took = started.elapsed().as_millis();
        let missing = match &outcome {
            Ok(_) => pg.missing_from_outbox(&acknowledged).await,
            Err(_) => Ok(Vec::new()),
        };
        let detail = match (&outcome, &missing) {
            (Ok((before, after)), Ok(missing)) => format!(
                "primary moved from port {before} to port {after} in {took} ms; {} of {} acknowledged commands missing from the outbox",
                missing.len(),
                acknowledged.len()
            ),
            (Ok((before, after)), Err(e)) => format!(
                "primary moved from port {before} to port {after} in {took} ms; outbox not read: {e}"
            ),
            (Err(e), _) => format!("failed: {e}"),
        };
        self.failovers.push(checks::FailoverRecord {
            cause: fault.kind.as_str(),
            outcome,
            acknowledged: acknowledged.len(),
            missing,
        });
        detail
    }

    /// Sleeps `gap`, stepping a stepped wall clock back when its hold ends meanwhile.
    pub(super) async fn sleep_restoring_clock(&mut self, gap: Duration) {
        let until = Instant::now() + gap;
        if let Some((_, back_at)) = self.clock_back
            && back_at < until
        {
            tokio::time::sleep_until(back_at).await;
            self.restore_clock().await;
        }
        tokio::time::sleep_until(until).await;
    }

    /// Steps replica `i`'s wall clock by `seconds` (it stays stepped across restarts until
    /// stepped back) and records what a process with its environment reads then.
    async fn step_clock(&mut self, i: usize, seconds: i64, hold: Duration) -> String {
        // One stepped replica at a time.
        self.restore_clock().await;
        if let Err(e) = self.replicas[i].set_clock_offset(seconds) {
            // Recorded unread: the check fails, the schedule's step did not happen.
            self.clock_steps.push(ClockStepRecord {
                replica: i,
                step: seconds,
                ..ClockStepRecord::default()
            });
            return format!("failed: {e}");
        }
        // The replica re-reads the file within two seconds (`FAKETIME_CACHE_DURATION=1`).
        tokio::time::sleep(CLOCK_REREAD).await;
        let observed = self.replicas[i].observed_clock_offset().await;
        let mut detail = format!(
            "wall clock {seconds:+} s for at least {} ms; libfaketime environment reads {}",
            hold.as_millis(),
            match &observed {
                Ok(o) => format!("{o:+} s"),
                Err(e) => e.clone(),
            }
        );
        // In-process evidence too, when it can show: hyper's `Date` header follows a forward
        // step at once (a backward one only once the clock passes its cached second).
        if let Ok(date) = replica::clock_offset(self.replicas[i].port, "/healthz").await {
            detail.push_str(&format!(", the replica's HTTP Date header {date:+} s"));
        }
        self.clock_steps.push(ClockStepRecord {
            replica: i,
            step: seconds,
            observed: observed.ok(),
            observed_back: None,
        });
        self.clock_back = Some((i, Instant::now() + hold));
        detail
    }

    /// Steps the stepped replica's wall clock back to the real time, if one is stepped, and
    /// records what its environment reads then.
    pub(super) async fn restore_clock(&mut self) {
        let Some((i, _)) = self.clock_back.take() else {
            return;
        };
        let restored = self.replicas[i].set_clock_offset(0);
        tokio::time::sleep(CLOCK_REREAD).await;
        let observed = match restored {
            Ok(()) => self.replicas[i].observed_clock_offset().await.ok(),
            Err(_) => None,
        };
        if let Some(record) = self.clock_steps.last_mut() {
            record.observed_back = observed;
        }
    }

    /// SIGSTOP replica `i` for `hold`; lists the commands it held (through another replica)
    /// and which of them were claimed again before SIGCONT.
    async fn pause(
        &mut self,
        i: usize,
        hold: Duration,
        plan: &Plan,
    ) -> Result<PauseRecord, String> {
        let client = self
            .other_client(i)
            .ok_or("no other replica running to observe the pause")?;
        let r = &self.replicas[i];
        let pid = r.pid().ok_or("replica not running")?;
        let generation = r.generation;
        r.stop().await?;
        let started = Instant::now();
        // A settle the process sent just before it stopped may still be committing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listed = workload::commands_of(&client, &plan.tenants, Some("processing")).await;
        let held: Vec<Value> = match listed {
            Ok(all) => all
                .into_iter()
                .filter(|c| c["lease_owner"].as_str().and_then(checks::owner_pid) == Some(pid))
                .collect(),
            Err(e) => {
                tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
                let _ = self.replicas[i].resume().await;
                return Err(e.to_string());
            }
        };
        tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
        let mut taken_over = Vec::new();
        for c in &held {
            let (Some(id), Some(epoch), Some(attempt)) = (
                c["id"].as_str(),
                c["lease_epoch"].as_i64(),
                c["attempt_count"].as_i64(),
            ) else {
                continue;
            };
            let path = format!(
                "/v1/commands?tenant_id={}&control_space_id={}&limit=1000",
                c["tenant_id"].as_str().unwrap_or(""),
                c["control_space_id"].as_str().unwrap_or("")
            );
            if let Ok(page) = client.expect(200, Method::GET, &path, None, None).await
                && let Some(now) = page["items"]
                    .as_array()
                    .and_then(|items| items.iter().find(|x| x["id"] == id))
                && now["lease_epoch"].as_i64().is_some_and(|e| e > epoch)
            {
                taken_over.push((id.to_owned(), epoch, attempt));
            }
        }
        self.replicas[i].resume().await?;
        Ok(PauseRecord {
            replica: i,
            generation,
            held: held.len(),
            taken_over,
        })
    }
}
