//! Paged snapshots of the reference directory (`docs/protocol.md`, "Paged snapshots").
//!
//! `?page_size=N` takes a snapshot of the model at that moment and answers its first page;
//! each page holds whole workspaces in uuid order, as many as fit in `N` memberships (at least
//! one). The snapshot is kept under the next page's token until that page is served, so every
//! page of one paging comes from the same snapshot however the model changes meanwhile. At
//! most [`KEPT`] pagings are kept; a token no longer kept answers `410 SNAPSHOT_PAGE_EXPIRED`.

use std::collections::VecDeque;
use std::sync::Arc;

use tenantry_directory::paging::page_digest;
use tenantry_directory::{DirectorySnapshot, DirectorySnapshotPage, SnapshotPageLink};

/// Pagings kept at once (the oldest is dropped first).
pub const KEPT: usize = 16;

/// Where one paging stands: the snapshot, the next page's first workspace, and the digest of
/// the page before it.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    token: String,
    snapshot: Arc<DirectorySnapshot>,
    start: usize,
    page_size: u64,
    previous_digest: String,
}

/// The pagings in progress.
#[derive(Debug, Default)]
pub(super) struct Pagings {
    pending: VecDeque<Pending>,
    issued: u64,
}

impl Pagings {
    /// The first page of `snapshot` (its workspaces sorted by uuid here) with pages of at most
    /// `page_size` memberships.
    pub(super) fn first(
        &mut self,
        mut snapshot: DirectorySnapshot,
        page_size: u64,
    ) -> serde_json::Result<Vec<u8>> {
        snapshot.workspaces.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        self.render(Arc::new(snapshot), 0, page_size.max(1), None)
    }

    /// Takes the paging `token` names: `None` when the token is not (or no longer) kept.
    pub(super) fn take(&mut self, token: &str) -> Option<Pending> {
        let at = self.pending.iter().position(|p| p.token == token)?;
        self.pending.remove(at)
    }

    /// The page a taken paging stands at.
    pub(super) fn next(&mut self, pending: Pending) -> serde_json::Result<Vec<u8>> {
        self.render(
            pending.snapshot,
            pending.start,
            pending.page_size,
            Some(pending.previous_digest),
        )
    }

    fn render(
        &mut self,
        snapshot: Arc<DirectorySnapshot>,
        start: usize,
        page_size: u64,
        previous_digest: Option<String>,
    ) -> serde_json::Result<Vec<u8>> {
        let mut end = start;
        let mut memberships = 0_u64;
        for workspace in snapshot.workspaces.iter().skip(start) {
            let size = workspace.members.len() as u64;
            if end > start && memberships + size > page_size {
                break;
            }
            memberships += size;
            end += 1;
        }
        let next_page_token = (end < snapshot.workspaces.len()).then(|| {
            self.issued += 1;
            format!("page-{}-{end}", self.issued)
        });
        let page = DirectorySnapshotPage {
            instance_uuid: snapshot.instance_uuid.clone(),
            cursor: snapshot.cursor,
            generated_at: snapshot.generated_at,
            workspaces: snapshot.workspaces[start..end].to_vec(),
            page: Some(SnapshotPageLink {
                previous_page_digest: previous_digest,
                next_page_token: next_page_token.clone(),
            }),
        };
        let body = serde_json::to_vec(&page)?;
        if let Some(token) = next_page_token {
            if self.pending.len() >= KEPT {
                self.pending.pop_front();
            }
            self.pending.push_back(Pending {
                token,
                snapshot,
                start: end,
                page_size,
                previous_digest: page_digest(&body),
            });
        }
        Ok(body)
    }

    /// Drops every paging in progress (their tokens then answer 410).
    pub(super) fn expire(&mut self) {
        self.pending.clear();
    }
}
