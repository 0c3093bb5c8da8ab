//! The demo's directory part: a reference directory of hundreds of workspaces and thousands
//! of members that keeps changing while the lifecycle workload runs, projected by the
//! service's `DirectoryProjector`; at the end the local tables must equal the provider's final
//! snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::Utc;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenantry_app::config::DirectorySettings;
use tenantry_directory::maps::{
    DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole, MembershipStatus, RowSource,
    WorkspaceStatus, map_account_status, map_membership_status, map_role,
};
use tenantry_directory::{
    AccountUuid, DirectoryMember, DirectoryWorkspace, InstanceUuid, MembershipUuid, WorkspaceUuid,
};
use tenantry_ports::directory::ProjectionTablesReader;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::FaultProfile;
use tenantry_testkit::knowledge_fs::DEFAULT_TOKEN;
use tokio::sync::watch;
use tokio::time::Instant;

use super::checks::CheckResult;
use super::client::AdminClient;

/// Workspaces at scale 1.0.
const WORKSPACES_AT_SCALE_1: f64 = 200.0;
/// Accounts at scale 1.0.
const ACCOUNTS_AT_SCALE_1: f64 = 1000.0;
/// Time between two directory changes while the workload runs.
const CHANGE_EVERY: Duration = Duration::from_millis(50);

/// One account of the generated directory (constant for the whole run).
#[derive(Debug, Clone)]
struct Account {
    uuid: AccountUuid,
    email: String,
    name: String,
}

/// A running reference directory and the accounts its members are drawn from.
#[derive(Debug)]
pub struct DemoDirectory {
    /// The provider.
    pub server: ReferenceDirectory,
    accounts: Vec<Account>,
    run: String,
}

/// What the churn changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Churn {
    /// Members added or re-added.
    pub members_added: u64,
    /// Members removed.
    pub members_removed: u64,
    /// Workspaces created during the run.
    pub workspaces_created: u64,
    /// Workspaces suspended, archived or deleted (a status change only: the members keep
    /// their own revisions).
    pub workspaces_archived: u64,
    /// Workspaces removed from the directory.
    pub workspaces_removed: u64,
    /// Entitlement events.
    pub entitlement_events: u64,
}

impl Churn {
    /// Changes in total.
    pub fn total(&self) -> u64 {
        self.members_added
            + self.members_removed
            + self.workspaces_created
            + self.workspaces_archived
            + self.workspaces_removed
            + self.entitlement_events
    }
}

/// Starts a reference directory with `profile` (over HTTPS with `tls`), filled with the initial
/// workspaces; returns it with the settings that point the service at it.
///
/// # Errors
/// A message when the server cannot start or an id does not parse.
pub async fn start(
    seed: u64,
    scale: f64,
    profile: FaultProfile,
    run: &str,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> Result<(DemoDirectory, DirectorySettings), String> {
    let instance = InstanceUuid::parse(format!("inst-{run}")).map_err(|e| e.to_string())?;
    let mut config = DirectoryServerConfig::new(instance.clone());
    config.profile = profile;
    config.seed = seed;
    config.key_seed = seed;
    config.bearer_token = Some(DEFAULT_TOKEN.to_owned());
    config.stall = Duration::from_secs(2);
    let (url, server) = ReferenceDirectory::start_tls_on(([127, 0, 0, 1], 0).into(), config, tls)
        .await
        .map_err(|e| format!("reference directory: {e}"))?;
    let accounts = (0..((ACCOUNTS_AT_SCALE_1 * scale).round() as usize).max(20))
        .map(|i| {
            Ok(Account {
                uuid: AccountUuid::parse(format!("acc-{i:05}-{run}")).map_err(|e| e.to_string())?,
                email: format!("user{i}-{run}@example.com"),
                name: format!("User {i}"),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let demo = DemoDirectory {
        server,
        accounts,
        run: run.to_owned(),
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0xD1EC);
    let workspaces = ((WORKSPACES_AT_SCALE_1 * scale).round() as usize).max(5);
    for i in 0..workspaces {
        let workspace = demo.new_workspace(&mut rng, i)?;
        demo.server.change(|m| m.upsert_workspace(workspace));
    }
    let settings = DirectorySettings {
        url,
        token: Some(DEFAULT_TOKEN.into()),
        instance: instance.to_string(),
        trusted_keys: demo
            .server
            .trusted_public_keys()
            .into_iter()
            .map(|(id, key)| (id, hex::encode(key)))
            .collect(),
        sync_interval: Duration::from_millis(200),
        max_staleness: Duration::from_secs(10),
        event_limit: 100,
        // plain HTTP; `tenantry-demo demo --tls` trusts the run's CA (`service_config`)
        tls: Default::default(),
    };
    Ok((demo, settings))
}

impl DemoDirectory {
    fn member(
        &self,
        workspace: &WorkspaceUuid,
        account: &Account,
        role: DirectoryRole,
    ) -> Result<DirectoryMember, String> {
        Ok(DirectoryMember {
            membership_uuid: MembershipUuid::parse(format!("m-{workspace}-{}", account.uuid))
                .map_err(|e| e.to_string())?,
            account_uuid: account.uuid.clone(),
            normalized_email: account.email.clone(),
            display_name: account.name.clone(),
            account_status: DirectoryAccountStatus::Active,
            role,
            membership_status: DirectoryMembershipStatus::Active,
            joined_at: None,
            projection_revision: 1,
        })
    }

    fn new_workspace(&self, rng: &mut StdRng, i: usize) -> Result<DirectoryWorkspace, String> {
        let uuid =
            WorkspaceUuid::parse(format!("ws-{i:05}-{}", self.run)).map_err(|e| e.to_string())?;
        let size = rng.random_range(5..=15).min(self.accounts.len());
        let mut picked = BTreeSet::new();
        while picked.len() < size {
            picked.insert(rng.random_range(0..self.accounts.len()));
        }
        let mut members = Vec::new();
        for (n, index) in picked.iter().enumerate() {
            let role = if n == 0 {
                DirectoryRole::Owner
            } else if rng.random::<f64>() < 0.2 {
                DirectoryRole::Admin
            } else {
                DirectoryRole::Member
            };
            members.push(self.member(&uuid, &self.accounts[*index], role)?);
        }
        let creator = members
            .first()
            .map(|m| m.account_uuid.clone())
            .ok_or("a workspace needs a member")?;
        Ok(DirectoryWorkspace {
            name: format!("Workspace {i}"),
            slug: uuid.to_string(),
            uuid,
            workspace_type: "team".to_owned(),
            status: WorkspaceStatus::Active,
            created_by_account_uuid: creator,
            projection_revision: 1,
            execution_generation: 1,
            members,
        })
    }

    /// Changes the directory every few milliseconds until `stop` turns true.
    pub async fn churn(&self, seed: u64, mut stop: watch::Receiver<bool>) -> Churn {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xC4A7);
        let mut churn = Churn::default();
        let mut next_index = 100_000;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return churn,
                () = tokio::time::sleep(CHANGE_EVERY) => {}
            }
            let workspaces = self.server.change(|m| m.workspaces());
            let active: Vec<&DirectoryWorkspace> = workspaces
                .iter()
                .filter(|w| w.status == WorkspaceStatus::Active)
                .collect();
            if active.is_empty() {
                continue;
            }
            let target = active[rng.random_range(0..active.len())];
            let roll: f64 = rng.random();
            if roll < 0.45 {
                let account = &self.accounts[rng.random_range(0..self.accounts.len())];
                if let Ok(member) = self.member(&target.uuid, account, DirectoryRole::Member) {
                    self.server
                        .change(|m| m.upsert_member(&target.uuid, member));
                    churn.members_added += 1;
                }
            } else if roll < 0.80 {
                // Never the creator: an active workspace keeps its creator as a member.
                let removable: Vec<&DirectoryMember> = target
                    .members
                    .iter()
                    .filter(|m| m.account_uuid != target.created_by_account_uuid)
                    .collect();
                if !removable.is_empty() {
                    let gone = removable[rng.random_range(0..removable.len())]
                        .membership_uuid
                        .clone();
                    self.server.change(|m| m.remove_member(&target.uuid, &gone));
                    churn.members_removed += 1;
                }
            } else if roll < 0.88 {
                if let Ok(workspace) = self.new_workspace(&mut rng, next_index) {
                    next_index += 1;
                    self.server.change(|m| m.upsert_workspace(workspace));
                    churn.workspaces_created += 1;
                }
            } else if roll < 0.93 {
                // A status change of the workspace alone: the members keep their own
                // revisions (shared/cases/001-workspace-status-change.md); their projected
                // status follows the workspace.
                let status = [
                    WorkspaceStatus::Suspended,
                    WorkspaceStatus::Archived,
                    WorkspaceStatus::Deleted,
                ][rng.random_range(0..3)];
                self.server
                    .change(|m| m.set_workspace_status(&target.uuid, status));
                churn.workspaces_archived += 1;
            } else if roll < 0.96 {
                self.server.change(|m| m.remove_workspace(&target.uuid));
                churn.workspaces_removed += 1;
            } else {
                self.server.change(|m| m.entitlement_changed(&target.uuid));
                churn.entitlement_events += 1;
            }
        }
    }

    /// Waits until the service reports its consumer cursor at the provider's cursor and the
    /// projection ready; returns the last status on timeout.
    ///
    /// # Errors
    /// The last status seen, as text.
    pub async fn wait_caught_up(
        &self,
        client: &AdminClient,
        deadline: Instant,
    ) -> Result<(), String> {
        let target = self.server.cursor();
        loop {
            let status = client
                .expect(200, Method::GET, "/v1/directory/status", None, None)
                .await
                .map_err(|e| e.to_string())?;
            if status["cursor"].as_i64() == Some(target) && status["ready"] == true {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("provider cursor {target}, service status {status}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Compares every projected table, read through the store's read port, with the
    /// provider's final snapshot.
    pub async fn check(
        &self,
        store: &dyn ProjectionTablesReader,
    ) -> (CheckResult, DirectoryCounts) {
        let mut problems = Vec::new();
        let mut counts = DirectoryCounts::default();
        let tables = match store.read_tables().await {
            Ok(t) => t,
            Err(e) => {
                return (
                    CheckResult {
                        name: "local directory tables equal the provider's final snapshot",
                        passed: false,
                        detail: format!("cannot read the projection: {e}"),
                    },
                    counts,
                );
            }
        };
        let snapshot = self.server.change(|m| m.snapshot(Utc::now()));
        let mut expected_memberships = BTreeSet::new();
        let mut accounts: BTreeMap<&AccountUuid, &DirectoryMember> = BTreeMap::new();
        for w in &snapshot.workspaces {
            counts.workspaces += 1;
            match tables.workspaces.get(&w.uuid) {
                None => problems.push(format!("workspace {} missing", w.uuid)),
                Some(row) => {
                    if row.status != w.status
                        || row.projection_revision != w.projection_revision
                        || row.name != w.name
                        || row.source != RowSource::Directory
                    {
                        problems.push(format!(
                            "workspace {}: local {:?} r{}, provider {:?} r{}",
                            w.uuid,
                            row.status,
                            row.projection_revision,
                            w.status,
                            w.projection_revision
                        ));
                    }
                }
            }
            for m in &w.members {
                counts.memberships += 1;
                expected_memberships.insert(m.membership_uuid.clone());
                accounts.insert(&m.account_uuid, m);
                let want_status = map_membership_status(m.membership_status, w.status);
                match tables.memberships.get(&m.membership_uuid) {
                    None => problems.push(format!("membership {} missing", m.membership_uuid)),
                    Some(row) => {
                        if row.workspace_uuid != w.uuid
                            || row.account_uuid != m.account_uuid
                            || row.role != map_role(m.role)
                            || row.status != want_status
                        {
                            problems.push(format!(
                                "membership {}: local {:?}/{:?}, provider {:?}/{:?}",
                                m.membership_uuid, row.role, row.status, m.role, want_status
                            ));
                        }
                    }
                }
            }
        }
        for (uuid, m) in &accounts {
            match tables.accounts.get(*uuid) {
                None => problems.push(format!("account {uuid} missing")),
                Some(row) => {
                    if row.normalized_email != m.normalized_email
                        || row.status != map_account_status(m.account_status)
                    {
                        problems.push(format!("account {uuid} differs"));
                    }
                }
            }
        }
        let provider: BTreeSet<&WorkspaceUuid> =
            snapshot.workspaces.iter().map(|w| &w.uuid).collect();
        // Only rows of this run's instance: a reused database may hold other instances.
        let ours: BTreeSet<&WorkspaceUuid> = tables
            .workspaces
            .iter()
            .filter(|(_, row)| row.instance_uuid.as_ref() == Some(&snapshot.instance_uuid))
            .map(|(uuid, _)| uuid)
            .collect();
        for (uuid, row) in &tables.workspaces {
            if ours.contains(uuid)
                && row.source == RowSource::Directory
                && !provider.contains(uuid)
                && row.status == WorkspaceStatus::Active
            {
                problems.push(format!(
                    "workspace {uuid} is gone from the provider but active locally"
                ));
            }
        }
        for (uuid, row) in &tables.memberships {
            if row.projection_revision > 0
                && ours.contains(&row.workspace_uuid)
                && !expected_memberships.contains(uuid)
                && row.status == MembershipStatus::Active
            {
                problems.push(format!(
                    "membership {uuid} is gone from the provider but active locally"
                ));
            }
        }
        counts.accounts = accounts.len() as u64;
        let passed = problems.is_empty();
        let detail = if passed {
            format!(
                "{} workspaces, {} memberships, {} accounts match",
                counts.workspaces, counts.memberships, counts.accounts
            )
        } else {
            format!(
                "{} problem(s): {}",
                problems.len(),
                problems
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        };
        (
            CheckResult {
                name: "local directory tables equal the provider's final snapshot",
                passed,
                detail,
            },
            counts,
        )
    }
}

/// Sizes of the provider's final snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectoryCounts {
    /// Workspaces.
    pub workspaces: u64,
    /// Memberships.
    pub memberships: u64,
    /// Distinct accounts.
    pub accounts: u64,
}
