//! Fixtures of the directory projection tests: the service's settings for a reference
//! directory, and a workspace to put in it.

use std::time::Duration;

use tenantry_app::config::DirectorySettings;
use tenantry_directory::maps::{
    DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole, WorkspaceStatus,
};
use tenantry_directory::{
    AccountUuid, DirectoryMember, DirectoryWorkspace, MembershipUuid, WorkspaceUuid,
};

/// The directory settings of instance `inst-1` reading the provider at `url`, trusting `keys`
/// (fast syncs: every 50 ms, stale after 30 s).
pub fn settings(url: String, keys: Vec<(String, [u8; 32])>) -> DirectorySettings {
    DirectorySettings {
        url,
        token: None,
        instance: "inst-1".to_owned(),
        trusted_keys: keys
            .into_iter()
            .map(|(id, k)| (id, k.iter().map(|b| format!("{b:02x}")).collect()))
            .collect(),
        sync_interval: Duration::from_millis(50),
        max_staleness: Duration::from_secs(30),
        event_limit: 100,
        tls: Default::default(),
    }
}

/// A workspace `uuid` of the reference directory with one member, its owner `acc-1`.
pub fn workspace(uuid: &str) -> DirectoryWorkspace {
    let account = AccountUuid::parse("acc-1").unwrap();
    DirectoryWorkspace {
        uuid: WorkspaceUuid::parse(uuid).unwrap(),
        name: "W".into(),
        slug: uuid.into(),
        workspace_type: "team".into(),
        status: WorkspaceStatus::Active,
        created_by_account_uuid: account.clone(),
        projection_revision: 1,
        execution_generation: 1,
        members: vec![DirectoryMember {
            membership_uuid: MembershipUuid::parse(format!("m-{uuid}")).unwrap(),
            account_uuid: account,
            normalized_email: "a@example.com".into(),
            display_name: "A".into(),
            account_status: DirectoryAccountStatus::Active,
            role: DirectoryRole::Owner,
            membership_status: DirectoryMembershipStatus::Active,
            joined_at: None,
            projection_revision: 1,
        }],
    }
}
