//! Projector configuration, capacity limits and the run-loop backoff rule.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::InstanceUuid;

/// Largest page the provider is asked for (`limit` of the events endpoint).
pub const MAX_EVENT_LIMIT: u32 = 100;
/// How often initialization retries a snapshot that another replica superseded.
pub const SNAPSHOT_ATTEMPTS: u32 = 5;

/// Longest wait between two syncs while the directory is over a capacity limit (unless half
/// the staleness is longer): 5 minutes. See [`ProjectorConfig::next_delay_after_capacity`].
pub const CAPACITY_RETRY_MAX_DELAY: Duration = Duration::from_secs(300);

/// One capacity limit of the projection: the three [`ProjectionLimits`] and the largest
/// provider answer the client reads (a limit of the HTTP adapter, named here so that every
/// capacity refusal has one name). Each is a setting of the service, `directory_<as_str>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum CapacityLimit {
    /// [`ProjectionLimits::max_snapshot_workspaces`].
    SnapshotWorkspaces,
    /// [`ProjectionLimits::max_snapshot_memberships`].
    SnapshotMemberships,
    /// [`ProjectionLimits::max_active_workspaces`] (on the input and on the committed state).
    ActiveWorkspaces,
    /// The largest response body the provider client reads, bytes.
    ResponseBytes,
}

impl CapacityLimit {
    /// Every limit, in label order.
    pub const ALL: [Self; 4] = [
        Self::SnapshotWorkspaces,
        Self::SnapshotMemberships,
        Self::ActiveWorkspaces,
        Self::ResponseBytes,
    ];

    /// The stable name (a metrics label): `max_snapshot_workspaces`,
    /// `max_snapshot_memberships`, `max_active_workspaces`, `max_response_bytes`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SnapshotWorkspaces => "max_snapshot_workspaces",
            Self::SnapshotMemberships => "max_snapshot_memberships",
            Self::ActiveWorkspaces => "max_active_workspaces",
            Self::ResponseBytes => "max_response_bytes",
        }
    }

    /// The setting of the service that raises it (TOML key; the environment variable is
    /// `TENANTRY_` and the key in upper case): `directory_` + [`Self::as_str`].
    pub fn setting(self) -> &'static str {
        match self {
            Self::SnapshotWorkspaces => "directory_max_snapshot_workspaces",
            Self::SnapshotMemberships => "directory_max_snapshot_memberships",
            Self::ActiveWorkspaces => "directory_max_active_workspaces",
            Self::ResponseBytes => "directory_max_response_bytes",
        }
    }
}

impl std::fmt::Display for CapacityLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Capacity limits of one instance's projection; bound memory and transaction size.
///
/// The service sets them with `directory_max_snapshot_workspaces`,
/// `directory_max_snapshot_memberships` and `directory_max_active_workspaces`
/// (docs/operations.md, "Directory capacity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectionLimits {
    /// Most workspaces one full snapshot may hold.
    pub max_snapshot_workspaces: usize,
    /// Most memberships one snapshot or delta may hold.
    pub max_snapshot_memberships: usize,
    /// Most active workspaces the instance may have (checked on the input and on the
    /// committed state).
    pub max_active_workspaces: usize,
}

impl Default for ProjectionLimits {
    /// 10,000 workspaces, 100,000 memberships, 10,000 active workspaces.
    fn default() -> Self {
        Self {
            max_snapshot_workspaces: 10_000,
            max_snapshot_memberships: 100_000,
            max_active_workspaces: 10_000,
        }
    }
}

/// A validated projector configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectorConfig {
    /// The instance projected into (trimmed).
    pub instance: InstanceUuid,
    /// Time between successful syncs.
    pub sync_interval: Duration,
    /// Age after which the projection is stale and `require_ready` refuses; also the lease
    /// written into the state row.
    pub max_staleness: Duration,
    /// Page size asked from the events endpoint (1..=100).
    pub event_limit: u32,
    /// Capacity limits.
    pub limits: ProjectionLimits,
}

/// Why a projector configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectorConfigError {
    /// The instance id is empty or blank.
    #[error("directory projection requires a non-empty instance id")]
    MissingInstance,
    /// The instance id is not a valid identifier.
    #[error("directory instance id is invalid: {0}")]
    InvalidInstance(tenantry_kernel::IdError),
    /// The sync interval is zero.
    #[error("directory sync interval must be positive")]
    NonPositiveInterval,
    /// `max_staleness` does not exceed the sync interval.
    #[error(
        "directory max staleness ({max_staleness:?}) must exceed the sync interval ({sync_interval:?})"
    )]
    StalenessNotAboveInterval {
        /// Configured interval.
        sync_interval: Duration,
        /// Configured staleness.
        max_staleness: Duration,
    },
    /// The event limit is outside 1..=100.
    #[error("directory event limit must be between 1 and {MAX_EVENT_LIMIT}, got {0}")]
    EventLimitOutOfRange(u32),
}

impl ProjectorConfig {
    /// Validates and builds a configuration.
    ///
    /// # Errors
    /// [`ProjectorConfigError`] when the instance is blank or invalid, the interval is zero,
    /// `max_staleness <= sync_interval`, or `event_limit` is outside 1..=100.
    pub fn new(
        instance: &str,
        sync_interval: Duration,
        max_staleness: Duration,
        event_limit: u32,
        limits: ProjectionLimits,
    ) -> Result<Self, ProjectorConfigError> {
        let trimmed = instance.trim();
        if trimmed.is_empty() {
            return Err(ProjectorConfigError::MissingInstance);
        }
        let instance =
            InstanceUuid::parse(trimmed).map_err(ProjectorConfigError::InvalidInstance)?;
        if sync_interval.is_zero() {
            return Err(ProjectorConfigError::NonPositiveInterval);
        }
        if max_staleness <= sync_interval {
            return Err(ProjectorConfigError::StalenessNotAboveInterval {
                sync_interval,
                max_staleness,
            });
        }
        if event_limit == 0 || event_limit > MAX_EVENT_LIMIT {
            return Err(ProjectorConfigError::EventLimitOutOfRange(event_limit));
        }
        Ok(Self {
            instance,
            sync_interval,
            max_staleness,
            event_limit,
            limits,
        })
    }

    /// The delay before the next sync: the interval after a success; after a failure the
    /// previous delay doubled, at least the interval and at most `max_staleness / 2`.
    pub fn next_delay(&self, previous: Duration, failed: bool) -> Duration {
        if !failed {
            return self.sync_interval;
        }
        let doubled = previous.saturating_mul(2).max(self.sync_interval);
        doubled.min(self.max_staleness / 2)
    }

    /// The delay before the next sync after the directory was refused for a capacity limit
    /// ([`CapacityLimit`]): the previous delay doubled, at least the interval and at most
    /// [`Self::capacity_retry_max_delay`]. A directory over its limit does not shrink between
    /// two short retries, and every retry downloads and parses the whole answer again.
    pub fn next_delay_after_capacity(&self, previous: Duration) -> Duration {
        let doubled = previous.saturating_mul(2).max(self.sync_interval);
        doubled.min(self.capacity_retry_max_delay())
    }

    /// The longest delay after a capacity refusal: [`CAPACITY_RETRY_MAX_DELAY`], or half the
    /// staleness when that is longer (never shorter than the backoff of other failures).
    pub fn capacity_retry_max_delay(&self) -> Duration {
        CAPACITY_RETRY_MAX_DELAY.max(self.max_staleness / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn configuration_validation() {
        let limits = ProjectionLimits::default();
        type Case = (
            &'static str,
            Duration,
            Duration,
            u32,
            Result<(), ProjectorConfigError>,
        );
        let cases: Vec<Case> = vec![
            ("inst", secs(5), secs(60), 100, Ok(())),
            ("  inst  ", secs(5), secs(60), 1, Ok(())),
            (
                "",
                secs(5),
                secs(60),
                100,
                Err(ProjectorConfigError::MissingInstance),
            ),
            (
                "   ",
                secs(5),
                secs(60),
                100,
                Err(ProjectorConfigError::MissingInstance),
            ),
            (
                "inst",
                Duration::ZERO,
                secs(60),
                100,
                Err(ProjectorConfigError::NonPositiveInterval),
            ),
            (
                "inst",
                secs(5),
                secs(5),
                100,
                Err(ProjectorConfigError::StalenessNotAboveInterval {
                    sync_interval: secs(5),
                    max_staleness: secs(5),
                }),
            ),
            (
                "inst",
                secs(5),
                secs(60),
                0,
                Err(ProjectorConfigError::EventLimitOutOfRange(0)),
            ),
            (
                "inst",
                secs(5),
                secs(60),
                101,
                Err(ProjectorConfigError::EventLimitOutOfRange(101)),
            ),
        ];
        for (instance, interval, staleness, limit, expected) in cases {
            let got = ProjectorConfig::new(instance, interval, staleness, limit, limits);
            assert_eq!(
                got.map(|_| ()),
                expected,
                "{instance:?} {interval:?} {staleness:?} {limit}"
            );
        }
        let config = ProjectorConfig::new("  inst ", secs(5), secs(60), 10, limits).unwrap();
        assert_eq!(config.instance.as_str(), "inst");
        assert!(matches!(
            ProjectorConfig::new("a b", secs(5), secs(60), 10, limits),
            Err(ProjectorConfigError::InvalidInstance(_))
        ));
    }

    #[test]
    fn backoff_doubles_up_to_half_the_staleness() {
        let config =
            ProjectorConfig::new("inst", secs(5), secs(60), 100, ProjectionLimits::default())
                .unwrap();
        let cases = [
            (secs(5), true, secs(10)),
            (secs(10), true, secs(20)),
            (secs(20), true, secs(30)),
            (secs(30), true, secs(30)),
            (secs(1), true, secs(5)),
            (secs(30), false, secs(5)),
        ];
        for (previous, failed, expected) in cases {
            assert_eq!(
                config.next_delay(previous, failed),
                expected,
                "{previous:?} {failed}"
            );
        }
    }

    #[test]
    fn capacity_backoff_doubles_up_to_five_minutes_or_half_the_staleness() {
        let config =
            ProjectorConfig::new("inst", secs(5), secs(60), 100, ProjectionLimits::default())
                .unwrap();
        let mut delay = secs(5);
        let mut seen = Vec::new();
        for _ in 0..8 {
            delay = config.next_delay_after_capacity(delay);
            seen.push(delay.as_secs());
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(config.next_delay_after_capacity(secs(1)), secs(5));
        let long = ProjectorConfig::new(
            "inst",
            secs(5),
            secs(3600),
            100,
            ProjectionLimits::default(),
        )
        .unwrap();
        assert_eq!(long.next_delay_after_capacity(secs(1000)), secs(1800));
    }

    #[test]
    fn capacity_limits_name_their_settings() {
        for limit in CapacityLimit::ALL {
            assert_eq!(limit.setting(), format!("directory_{}", limit.as_str()));
        }
    }
}
