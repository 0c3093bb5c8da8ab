//! The model checker's view of [`LeaseProtocol`]: initial states, the actions enabled in a
//! state, the next state of each, and the properties checked.

use stateright::{Model, Property};
use tenantry_kernel::LeaseEpoch;
use tenantry_lifecycle::{CommandStatus, ControlSpaceState, Transition};

use super::domain::{abstract_cs, control_space, ids, t};
use super::store::{Conclusion, Refused};
use super::{
    AttemptPhase, CallAnswer, DELETE, HeldLease, KfsCall, LEASE_TICKS, LeaseAction, LeaseBug,
    LeaseProtocol, LeaseState, OutboxRow, PROVISION, SpaceView,
};

impl Model for LeaseProtocol {
    type State = LeaseState;
    type Action = LeaseAction;

    fn init_states(&self) -> Vec<LeaseState> {
        // Intake created the control space (provisioning, owned by the provision) and its
        // provision command in one transaction.
        vec![LeaseState {
            now: 0,
            rows: [OutboxRow::new(true), OutboxRow::new(false)],
            cs: SpaceView {
                state: ControlSpaceState::Provisioning,
                owned_by_delete: false,
                version: 1,
                space: None,
                revision: 0,
                irreversible: false,
            },
            created: 0,
            alive: None,
            tombstone: false,
            workers: [None, None, None],
        }]
    }

    fn actions(&self, state: &LeaseState, actions: &mut Vec<LeaseAction>) {
        let deciding = state.workers.iter().any(|h| {
            h.as_ref().is_some_and(|h| {
                matches!(h.phase, AttemptPhase::Answered(CallAnswer::Looked { .. }))
            })
        });
        if state.now < self.max_time && (self.slow_lookups || !deciding) {
            actions.push(LeaseAction::Tick);
        }
        if !state.rows[DELETE].enqueued
            && matches!(
                state.cs.state,
                ControlSpaceState::Provisioning | ControlSpaceState::Active
            )
        {
            actions.push(LeaseAction::RequestDelete);
        }
        for (w, slot) in state.workers.iter().enumerate() {
            let worker = w as u8;
            match slot {
                None => {
                    for (c, row) in state.rows.iter().enumerate() {
                        if self.claimable(state, row) {
                            actions.push(LeaseAction::Claim(worker, c as u8));
                        }
                    }
                }
                Some(held) => {
                    actions.push(LeaseAction::Crash(worker));
                    let live = self.believes_live(state, w, held);
                    // The engine renews every lease/3; renewing earlier than the last tick
                    // before expiry reaches no state a later renewal does not.
                    if live && held.expires == state.now + 1 {
                        actions.push(LeaseAction::Renew(worker));
                    }
                    match &held.phase {
                        AttemptPhase::Claimed => actions.push(LeaseAction::Read(worker)),
                        // The engine checks its lease before every remote call.
                        AttemptPhase::ToCall(call) if live => {
                            let outcomes: &[(bool, bool)] = if *call == KfsCall::Lookup {
                                &[(true, true), (false, true)]
                            } else {
                                &[(true, true), (false, true), (false, false)]
                            };
                            for &(answered, landed) in outcomes {
                                actions.push(LeaseAction::Call {
                                    worker,
                                    answered,
                                    landed,
                                });
                            }
                        }
                        AttemptPhase::ToCall(_) => {}
                        AttemptPhase::Answered(_) => actions.push(LeaseAction::Settle(worker)),
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &LeaseState, action: LeaseAction) -> Option<LeaseState> {
        let mut s = last.clone();
        match action {
            LeaseAction::Tick => s.now += 1,
            LeaseAction::RequestDelete => {
                let cs = control_space(&s.cs);
                let next = cs
                    .apply(
                        &Transition::BeginDeletion {
                            operation_id: ids::op(DELETE),
                        },
                        t(s.now),
                    )
                    .ok()?;
                s.cs = abstract_cs(&next);
                s.rows[DELETE] = OutboxRow {
                    next_at: s.now,
                    ..OutboxRow::new(true)
                };
            }
            LeaseAction::Claim(worker, c) => {
                let now = s.now;
                let row = &mut s.rows[usize::from(c)];
                row.prior_window = row.window_end;
                row.status = CommandStatus::Processing;
                row.owner = Some(worker);
                row.expires = now + LEASE_TICKS;
                row.window_end = Some(row.expires);
                row.epoch = u8::try_from(LeaseEpoch(i64::from(row.epoch)).next().0).ok()?;
                row.claims += 1;
                row.settled_epoch = None;
                s.workers[usize::from(worker)] = Some(HeldLease {
                    cmd: c,
                    epoch: row.epoch,
                    expires: row.expires,
                    claimed_at: now,
                    claims: row.claims,
                    phase: AttemptPhase::Claimed,
                });
            }
            LeaseAction::Renew(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let now = s.now;
                let row = &mut s.rows[usize::from(held.cmd)];
                if Self::holds_lease(row, worker, held.epoch) {
                    row.expires = now + LEASE_TICKS;
                    row.window_end = Some(row.expires);
                    held.expires = row.expires;
                    s.workers[w] = Some(held);
                } else {
                    // Renewal refused: the dispatcher abandons the attempt.
                    s.workers[w] = None;
                }
            }
            LeaseAction::Read(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                match self.read(&s, worker, &held) {
                    Ok(call) => {
                        held.phase = AttemptPhase::ToCall(call);
                        s.workers[w] = Some(held);
                    }
                    Err(settlement) => {
                        self.settle(&mut s, worker, &held, &settlement);
                        s.workers[w] = None;
                    }
                }
            }
            LeaseAction::Call {
                worker,
                answered,
                landed,
            } => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let AttemptPhase::ToCall(call) = held.phase else {
                    return None;
                };
                let answer = match call {
                    KfsCall::Provision if s.tombstone => {
                        if answered {
                            CallAnswer::SpaceDeleted
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                    KfsCall::Provision => {
                        if landed
                            && (s.alive.is_none() || self.bug == LeaseBug::NonIdempotentRemote)
                        {
                            s.created += 1;
                            s.alive = Some(s.created);
                        }
                        match (answered, s.alive) {
                            (true, Some(index)) => CallAnswer::Provisioned(index),
                            _ => CallAnswer::Unknown,
                        }
                    }
                    KfsCall::Lookup => {
                        if answered {
                            CallAnswer::Looked {
                                sent_at: s.now,
                                found: s.alive,
                                provision: s.rows[PROVISION].clone(),
                            }
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                    KfsCall::Delete(index) => {
                        if landed && s.alive == Some(index) {
                            s.alive = None;
                            s.tombstone = true;
                        }
                        if answered {
                            CallAnswer::Deleted
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                };
                held.phase = AttemptPhase::Answered(answer);
                s.workers[w] = Some(held);
            }
            LeaseAction::Settle(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let AttemptPhase::Answered(answer) = &held.phase else {
                    return None;
                };
                match self.conclude(&s, worker, &held, answer) {
                    Conclusion::Settle(settlement) => {
                        self.settle(&mut s, worker, &held, &settlement);
                        s.workers[w] = None;
                    }
                    Conclusion::Continue(registration, call) => {
                        if let Some(registration) = registration {
                            match self.apply(&mut s, worker, &held, &registration) {
                                Ok(()) => {}
                                Err(Refused::LeaseLost) => {
                                    s.workers[w] = None;
                                    return Some(s);
                                }
                                Err(Refused::Conflict) => {
                                    self.settle(&mut s, worker, &held, &registration);
                                    s.workers[w] = None;
                                    return Some(s);
                                }
                            }
                        }
                        held.phase = AttemptPhase::ToCall(call);
                        s.workers[w] = Some(held);
                    }
                }
            }
            LeaseAction::Crash(worker) => s.workers[usize::from(worker)] = None,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "at most one live lease per command",
                |m: &Self, s: &LeaseState| {
                    (0..2u8).all(|c| {
                        s.workers
                            .iter()
                            .enumerate()
                            .filter(|(w, h)| {
                                h.as_ref()
                                    .is_some_and(|h| h.cmd == c && m.believes_live(s, *w, h))
                            })
                            .count()
                            <= 1
                    })
                },
            ),
            // Observed from the store: the epoch of the settle it last accepted for a row against
            // the epoch of the row's lease (only a claim changes it, and a claim clears the
            // record).
            Property::always(
                "no settle accepted from a stale epoch",
                |_, s: &LeaseState| {
                    s.rows
                        .iter()
                        .all(|r| r.settled_epoch.is_none_or(|e| e == r.epoch))
                },
            ),
            Property::always(
                "at most one remote space per provisioning key",
                |_, s: &LeaseState| s.created <= 1,
            ),
            Property::always(
                "a deleted control space has no remote space",
                |_, s: &LeaseState| s.cs.state != ControlSpaceState::Deleted || s.alive.is_none(),
            ),
            Property::sometimes("every command completes", |_, s: &LeaseState| {
                s.rows[DELETE].enqueued && s.rows.iter().all(|r| r.status.is_terminal())
            }),
        ]
    }
}
