//! Tenant-fair claim order: each command's *turn*.
//!
//! Claims take due commands in turn order (`turn_at`, then due time, enqueue time and id), not
//! in enqueue order, so one tenant's backlog does not hold back every other tenant's commands
//! (docs/protocol.md, "Fair claims across tenants"). The rule is start-time fair queueing:
//!
//! - the *virtual time* is the earliest turn among all live commands (pending or processing,
//!   not finished), the head of the queue, or the store's clock when that is earlier (or when
//!   nothing is live);
//! - a command's turn is the later of the virtual time and [`TURN_SPACING`] (1 ms) after the
//!   latest turn among its tenant's live commands;
//! - a batch of `n` commands of one tenant takes `n` consecutive turns.
//!
//! A tenant without live commands takes its turn at the head of the queue: its command is
//! claimed next, however long another tenant's backlog is and however slowly that backlog
//! drains. A tenant with a backlog spreads it over 1 ms of turns per command, so other tenants'
//! commands interleave with it one for one. Alone, a backlog drains as fast as before: turns
//! order claims, they never delay one. On an idle queue every command's turn is its enqueue
//! time (first in, first out).
//!
//! A command keeps its turn for life: a retry or an operator retry is claimed, once due,
//! before commands that took later turns. Once a tenant's live commands are all finished it
//! owes nothing (the rule reads live commands only, so no debt outlives the backlog).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// Distance between two consecutive turns of one tenant's backlog: 1 ms (turns are stored in
/// milliseconds).
pub const TURN_SPACING: Duration = Duration::from_millis(1);

/// What intake reads before it gives turns: the store's clock and the live commands' turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// The store's clock.
    pub now: DateTime<Utc>,
    /// The earliest turn among all live commands (the head of the queue); `None` when none is
    /// live.
    pub head: Option<DateTime<Utc>>,
}

impl Queue {
    /// The virtual time: the head of the queue, or `now` when that is earlier or nothing is
    /// live.
    pub fn virtual_time(&self) -> DateTime<Utc> {
        self.head.map_or(self.now, |head| head.min(self.now))
    }
}

/// The turn of a command of a tenant enqueued on `queue`, when the latest turn among the
/// tenant's live commands is `tenant_latest` (`None` when it has none): the later of the
/// [virtual time](Queue::virtual_time) and `tenant_latest` + [`TURN_SPACING`].
pub fn next_turn(queue: Queue, tenant_latest: Option<DateTime<Utc>>) -> DateTime<Utc> {
    turns(queue, tenant_latest, 1).start
}

/// The turns of `count` commands of one tenant enqueued together on `queue`: the first is
/// [`next_turn`], each next one [`TURN_SPACING`] later. `count` 0 gives an empty run that
/// starts at [`next_turn`].
pub fn turns(queue: Queue, tenant_latest: Option<DateTime<Utc>>, count: usize) -> Turns {
    let spacing = chrono::Duration::milliseconds(TURN_SPACING.as_millis() as i64);
    let virtual_time = queue.virtual_time();
    let after_latest = tenant_latest.map(|latest| latest + spacing);
    let start = after_latest.map_or(virtual_time, |after| after.max(virtual_time));
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

    fn queue(now: i64, head: Option<i64>) -> Queue {
        Queue {
            now: at(now),
            head: head.map(at),
        }
    }

    #[test]
    fn a_turn_is_the_later_of_the_virtual_time_and_just_after_the_tenants_latest() {
        let table = [
            // (now, head of the queue, tenant's latest live turn, expected turn)
            (1_000, None, None, 1_000),
            (1_000, Some(1_500), None, 1_000), // a backlog running ahead: the clock
            (1_000, Some(400), None, 400),     // a backlog behind the clock: its head
            (1_000, Some(400), Some(500), 501),
            (1_000, Some(1_000), Some(1_000), 1_001),
            (1_000, Some(0), Some(101_000), 101_001),
        ];
        for (now, head, latest, expected) in table {
            assert_eq!(
                next_turn(queue(now, head), latest.map(at)),
                at(expected),
                "now {now}, head {head:?}, latest {latest:?}"
            );
        }
    }

    #[test]
    fn a_batch_takes_consecutive_turns() {
        let batch: Vec<_> = turns(queue(1_000, Some(900)), Some(at(1_500)), 3).collect();
        assert_eq!(batch, vec![at(1_501), at(1_502), at(1_503)]);
        let fresh: Vec<_> = turns(queue(1_000, None), None, 2).collect();
        assert_eq!(fresh, vec![at(1_000), at(1_001)]);
        assert_eq!(turns(queue(1_000, None), None, 0).count(), 0);
        assert_eq!(turns(queue(1_000, None), None, 7).len(), 7);
    }

    #[test]
    fn a_later_tenant_goes_to_the_head_however_slowly_a_backlog_drains() {
        // Tenant A enqueues 100,000 commands at t = 0; 60 s later only 6,000 are done (100 a
        // second: a slow remote), so the head of the queue is A's turn 6,000 ms.
        let backlog: Vec<_> = turns(queue(0, None), None, 100_000).collect();
        let head = backlog[6_000];
        let b = next_turn(queue(60_000, Some(head.timestamp_millis())), None);
        assert_eq!(b, head, "B takes the head's turn");
        let ahead_of_b = backlog[6_000..].iter().filter(|turn| **turn < b).count();
        assert_eq!(ahead_of_b, 0);
        // With the clock alone as virtual time, 54,000 of A's commands would be ahead of B.
        let by_clock = backlog[6_000..]
            .iter()
            .filter(|turn| **turn < at(60_000))
            .count();
        assert_eq!(by_clock, 54_000);
    }
}
