//! Tenant-fair claim order: each command's *turn*.
//!
//! Claims take due commands in turn order (`turn_at`, then due time, enqueue time and id), not
//! in enqueue order, so one tenant's backlog does not hold back every other tenant's commands
//! (docs/protocol.md, "Fair claims across tenants"). The rule is start-time fair queueing with
//! the store's clock as virtual time:
//!
//! - a command's turn is the later of its enqueue time and [`TURN_SPACING`] (1 ms) after the
//!   latest turn among its tenant's live commands (pending or processing, not finished);
//! - a batch of `n` commands of one tenant takes `n` consecutive turns.
//!
//! A tenant that enqueues no faster than 1,000 commands a second keeps turns equal to its
//! enqueue times (first in, first out with everybody else). A tenant that enqueues a backlog of
//! 100,000 commands at once spreads it over 100 s of turns, so a command another tenant
//! enqueues a second later takes its turn after about 1,000 of the backlog's commands, however
//! long the backlog is. Alone, a backlog drains as fast as before: turns order claims, they
//! never delay one.
//!
//! A command keeps its turn for life: a retry or an operator retry is claimed, once due,
//! before commands that took later turns. Once a tenant's live commands are all finished its
//! next command's turn is its enqueue time again (the rule reads live commands only, so no
//! debt outlives the backlog).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// Distance between two consecutive turns of one tenant's backlog: 1 ms (turns are stored in
/// milliseconds).
pub const TURN_SPACING: Duration = Duration::from_millis(1);

/// The turn of a command of a tenant enqueued at store time `now`, when the latest turn among
/// the tenant's live commands is `tenant_latest` (`None` when it has none): the later of `now`
/// and `tenant_latest` + [`TURN_SPACING`].
pub fn next_turn(now: DateTime<Utc>, tenant_latest: Option<DateTime<Utc>>) -> DateTime<Utc> {
    turns(now, tenant_latest, 1).start
}

/// The turns of `count` commands of one tenant enqueued together at store time `now`: the first
/// is [`next_turn`], each next one [`TURN_SPACING`] later. `count` 0 gives an empty run that
/// starts at [`next_turn`].
pub fn turns(now: DateTime<Utc>, tenant_latest: Option<DateTime<Utc>>, count: usize) -> Turns {
    let spacing = chrono::Duration::milliseconds(TURN_SPACING.as_millis() as i64);
    let after_latest = tenant_latest.map(|latest| latest + spacing);
    let start = after_latest.map_or(now, |after| after.max(now));
    Turns {
        start,
        spacing,
        remaining: count,
    }
}

/// Consecutive turns of one tenant's batch (see [`turns`]).
#[derive(Debug, Clone)]
pub struct Turns {
    start: DateTime<Utc>,
    spacing: chrono::Duration,
    remaining: usize,
}

impl Iterator for Turns {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let turn = self.start;
        self.start += self.spacing;
        Some(turn)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Turns {}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn a_turn_is_the_later_of_now_and_just_after_the_tenants_latest() {
        let table = [
            // (now, tenant's latest live turn, expected turn)
            (1_000, None, 1_000),
            (1_000, Some(500), 1_000),
            (1_000, Some(999), 1_000),
            (1_000, Some(1_000), 1_001),
            (1_000, Some(101_000), 101_001),
        ];
        for (now, latest, expected) in table {
            assert_eq!(
                next_turn(at(now), latest.map(at)),
                at(expected),
                "now {now}, latest {latest:?}"
            );
        }
    }

    #[test]
    fn a_batch_takes_consecutive_turns() {
        let batch: Vec<_> = turns(at(1_000), Some(at(1_500)), 3).collect();
        assert_eq!(batch, vec![at(1_501), at(1_502), at(1_503)]);
        let fresh: Vec<_> = turns(at(1_000), None, 2).collect();
        assert_eq!(fresh, vec![at(1_000), at(1_001)]);
        assert_eq!(turns(at(1_000), None, 0).count(), 0);
        assert_eq!(turns(at(1_000), None, 7).len(), 7);
    }

    #[test]
    fn a_later_tenant_takes_its_turn_inside_an_earlier_backlog() {
        // Tenant A enqueues 100,000 commands at t = 0; tenant B enqueues one at t = 1 s.
        let backlog: Vec<_> = turns(at(0), None, 100_000).collect();
        let b = next_turn(at(1_000), None);
        let ahead_of_b = backlog.iter().filter(|turn| **turn <= b).count();
        assert_eq!(ahead_of_b, 1_001);
    }
}
