//! A paged snapshot kept on disk while it is applied: each verified page's body, exactly as
//! received, is appended to an anonymous temporary file (removed when the snapshot is
//! dropped, or by the operating system if the process dies), and read back and parsed one page
//! at a time by the apply ([`SnapshotSource`]). The process then holds one page of the
//! snapshot instead of all of it (issue 34). The file lives in the system's temporary folder
//! (`TMPDIR`) and takes about the snapshot's body size.

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Mutex;

use std::collections::BTreeMap;

use tenantry_directory::{DirectorySnapshotPage, DirectoryWorkspace, InstanceUuid, WorkspaceUuid};
use tenantry_ports::directory::{ActiveGenerations, SnapshotReadError, SnapshotSource};

/// The verified pages of one snapshot, spooled (see the module documentation).
#[derive(Debug)]
pub struct SpooledSnapshot {
    instance_uuid: InstanceUuid,
    cursor: i64,
    file: Mutex<File>,
    /// Offset and length of each page's body in `file`.
    pages: Vec<(u64, usize)>,
    end: u64,
    /// The active workspaces of the pages appended (the client parsed each page once).
    active: ActiveGenerations,
}

impl SpooledSnapshot {
    /// An empty spool for the snapshot of `instance_uuid` at `cursor`.
    ///
    /// # Errors
    /// The temporary file cannot be created.
    pub fn new(instance_uuid: InstanceUuid, cursor: i64) -> std::io::Result<Self> {
        Ok(Self {
            instance_uuid,
            cursor,
            file: Mutex::new(tempfile::tempfile()?),
            pages: Vec::new(),
            end: 0,
            active: ActiveGenerations::default(),
        })
    }

    /// Appends the body of the next page (already verified and checked against the pages
    /// before it), whose parsed workspaces are `workspaces`.
    ///
    /// # Errors
    /// The write failed (e.g. the temporary folder is full).
    pub fn append(
        &mut self,
        body: &[u8],
        workspaces: &[DirectoryWorkspace],
    ) -> std::io::Result<()> {
        self.active.add(workspaces);
        let file = self
            .file
            .get_mut()
            .map_err(|_| std::io::Error::other("spool lock poisoned"))?;
        file.seek(SeekFrom::Start(self.end))?;
        file.write_all(body)?;
        self.pages.push((self.end, body.len()));
        self.end += body.len() as u64;
        Ok(())
    }
}

impl SnapshotSource for SpooledSnapshot {
    fn instance_uuid(&self) -> &InstanceUuid {
        &self.instance_uuid
    }

    fn cursor(&self) -> i64 {
        self.cursor
    }

    fn page_count(&self) -> usize {
        self.pages.len()
    }

    fn read_page(&self, index: usize) -> Result<Cow<'_, [DirectoryWorkspace]>, SnapshotReadError> {
        let failed = |message: String| SnapshotReadError {
            page: index,
            message,
        };
        let (offset, len) = *self
            .pages
            .get(index)
            .ok_or_else(|| failed(format!("the snapshot has {} pages", self.pages.len())))?;
        let mut body = vec![0; len];
        {
            let mut file = self
                .file
                .lock()
                .map_err(|_| failed("spool lock poisoned".into()))?;
            file.seek(SeekFrom::Start(offset))
                .and_then(|_| file.read_exact(&mut body))
                .map_err(|e| failed(e.to_string()))?;
        }
        let page: DirectorySnapshotPage =
            serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))?;
        let mut workspaces = page.workspaces;
        for workspace in &mut workspaces {
            workspace.members.shrink_to_fit();
        }
        Ok(Cow::Owned(workspaces))
    }

    fn active_generations(&self) -> Result<BTreeMap<WorkspaceUuid, i64>, SnapshotReadError> {
        Ok(self.active.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantry_directory::DirectorySnapshot;

    fn body(uuids: &[&str]) -> Vec<u8> {
        let page = DirectorySnapshot {
            instance_uuid: InstanceUuid::parse("inst-1").unwrap(),
            cursor: 3,
            generated_at: chrono::Utc::now(),
            workspaces: uuids
                .iter()
                .map(|u| tenantry_directory::testing::workspace(u, 1, &[("a", 1)]))
                .collect(),
        };
        serde_json::to_vec(&page).unwrap()
    }

    #[test]
    fn pages_read_back_in_any_order_any_number_of_times() {
        let mut spool = SpooledSnapshot::new(InstanceUuid::parse("inst-1").unwrap(), 3).unwrap();
        let page = |uuids: &[&str]| -> Vec<DirectoryWorkspace> {
            serde_json::from_slice::<DirectorySnapshotPage>(&body(uuids))
                .unwrap()
                .workspaces
        };
        spool
            .append(&body(&["ws-1", "ws-2"]), &page(&["ws-1", "ws-2"]))
            .unwrap();
        spool.append(&body(&["ws-3"]), &page(&["ws-3"])).unwrap();
        assert_eq!(spool.active_generations().unwrap().len(), 3);
        assert_eq!(spool.page_count(), 2);
        assert_eq!(spool.cursor(), 3);
        let names = |i| -> Vec<String> {
            spool
                .read_page(i)
                .unwrap()
                .iter()
                .map(|w| w.uuid.to_string())
                .collect()
        };
        assert_eq!(names(1), ["ws-3"]);
        assert_eq!(names(0), ["ws-1", "ws-2"]);
        assert_eq!(names(1), ["ws-3"]);
        assert_eq!(spool.read_page(2).unwrap_err().page, 2);
    }
}
