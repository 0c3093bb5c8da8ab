//! A verified snapshot read back one page at a time ([`SnapshotSource`]): what a provider that
//! pages its snapshot hands the projector instead of one joined value, so the apply holds one
//! page of it at a time (issue 34; `docs/protocol.md`, "Paged snapshots").

use std::borrow::Cow;

use std::collections::BTreeMap;

use tenantry_directory::maps::WorkspaceStatus;
use tenantry_directory::{DirectorySnapshot, DirectoryWorkspace, InstanceUuid, WorkspaceUuid};

/// A spooled page could not be read back (a local I/O failure, not the provider's fault).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "reading back page {page} of the spooled directory snapshot failed: {message}; the projector fetches the snapshot again on its next attempt"
)]
pub struct SnapshotReadError {
    /// 0-based index of the page.
    pub page: usize,
    /// What failed (the I/O or decoding error).
    pub message: String,
}

/// A verified snapshot whose pages can be read any number of times, in order. Its pages hold
/// whole workspaces; every workspace of a page sorts after every workspace of the pages before
/// it (a one-page source may hold its workspaces in any order).
///
/// A [`DirectorySnapshot`] is a source of one page, lent without a copy.
pub trait SnapshotSource: Send + Sync {
    /// The instance the snapshot is for.
    fn instance_uuid(&self) -> &InstanceUuid;
    /// The event-stream position the snapshot covers.
    fn cursor(&self) -> i64;
    /// How many pages [`read_page`](Self::read_page) serves (indexes `0..page_count()`).
    fn page_count(&self) -> usize;
    /// The workspaces of page `index`: lent when the source holds them, read back (and
    /// parsed) when it spooled them.
    ///
    /// # Errors
    /// [`SnapshotReadError`] when a spooled page cannot be read back.
    fn read_page(&self, index: usize) -> Result<Cow<'_, [DirectoryWorkspace]>, SnapshotReadError>;

    /// The active workspaces with their execution generations (what the projector publishes
    /// after the apply). By default the pages are read once more; a source that saw every page
    /// already keeps the answer.
    ///
    /// # Errors
    /// [`SnapshotReadError`] when a page cannot be read back.
    fn active_generations(&self) -> Result<BTreeMap<WorkspaceUuid, i64>, SnapshotReadError> {
        let mut active = ActiveGenerations::default();
        for index in 0..self.page_count() {
            active.add(&self.read_page(index)?);
        }
        Ok(active.0)
    }
}

/// A snapshot source of any type that owns its data (the object's lifetime is `'static`), as
/// the apply port takes it.
pub type AnySnapshotSource = dyn SnapshotSource;

impl SnapshotSource for DirectorySnapshot {
    fn instance_uuid(&self) -> &InstanceUuid {
        &self.instance_uuid
    }

    fn cursor(&self) -> i64 {
        self.cursor
    }

    fn page_count(&self) -> usize {
        1
    }

    fn read_page(&self, index: usize) -> Result<Cow<'_, [DirectoryWorkspace]>, SnapshotReadError> {
        match index {
            0 => Ok(Cow::Borrowed(&self.workspaces)),
            _ => Err(SnapshotReadError {
                page: index,
                message: "a whole snapshot has one page".into(),
            }),
        }
    }
}

/// Joins every page of `source` into one snapshot (`generated_at` is not part of a source and
/// is set to `generated_at`): what a store without a page-by-page apply applies.
///
/// # Errors
/// The first page that cannot be read back.
pub fn join_pages(
    source: &AnySnapshotSource,
    generated_at: chrono::DateTime<chrono::Utc>,
) -> Result<DirectorySnapshot, SnapshotReadError> {
    let mut workspaces = Vec::new();
    for index in 0..source.page_count() {
        workspaces.extend(source.read_page(index)?.into_owned());
    }
    Ok(DirectorySnapshot {
        instance_uuid: source.instance_uuid().clone(),
        cursor: source.cursor(),
        generated_at,
        workspaces,
    })
}

/// The active workspaces and their execution generations of the pages added so far: what a
/// source that reads its pages once anyway (a spool being written) keeps for
/// [`SnapshotSource::active_generations`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActiveGenerations(pub BTreeMap<WorkspaceUuid, i64>);

impl ActiveGenerations {
    /// Adds the active workspaces of `workspaces`.
    pub fn add(&mut self, workspaces: &[DirectoryWorkspace]) {
        for workspace in workspaces {
            if workspace.status == WorkspaceStatus::Active {
                self.0
                    .insert(workspace.uuid.clone(), workspace.execution_generation);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantry_directory::testing::{archived, snapshot, workspace};

    #[test]
    fn a_whole_snapshot_is_one_lent_page() {
        let s = snapshot(5, vec![workspace("ws-1", 1, &[("a", 1)]), archived("ws-2")]);
        assert_eq!(s.page_count(), 1);
        assert!(matches!(s.read_page(0), Ok(Cow::Borrowed(_))));
        assert_eq!(s.read_page(1).unwrap_err().page, 1);
        assert_eq!(join_pages(&s, s.generated_at).unwrap(), s);
        let active = s.active_generations().unwrap();
        assert_eq!(active.len(), 1);
        assert_eq!(active[&tenantry_directory::testing::ws_id("ws-1")], 1);
    }
}
