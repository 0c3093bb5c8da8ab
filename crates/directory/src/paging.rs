//! Paged snapshots: the rules that join a provider's pages into one [`DirectorySnapshot`]
//! (`docs/protocol.md`, "Paged snapshots"; a Tenantry extension of the reference protocol).
//!
//! Each page is verified on its own (its signature binds the request, so the page answers
//! the token the previous page named). [`SnapshotPages`] then checks what binds the pages to
//! one snapshot: the same instance and cursor on every page, each page naming the SHA-256 of
//! the previous page's body ([`page_digest`]), and workspaces in strictly ascending uuid order
//! across all pages (so no workspace is sent twice and the snapshot is in the order its
//! fingerprint hashes). A page that breaks a rule refuses the whole snapshot: nothing of it is
//! applied, and the next attempt starts again from the first page.

use chrono::{DateTime, Utc};
use tenantry_kernel::Fingerprint;

use crate::ids::{InstanceUuid, WorkspaceUuid};
use crate::model::{
    DirectorySnapshot, DirectorySnapshotPage, DirectoryWorkspace, SnapshotPageLink,
};

/// Why the pages of a snapshot do not form one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// The first answer names a previous page.
    #[error(
        "the first snapshot page names a previous page (digest {digest}); the provider must start a paged snapshot with previous_page_digest null"
    )]
    FirstPageHasPrevious {
        /// The digest it named.
        digest: String,
    },
    /// A later answer is not a page (no `page` object): the provider stopped paging.
    #[error("snapshot page {number} has no page links; every page after the first must carry them")]
    NotAPage {
        /// 1-based number of the page.
        number: u64,
    },
    /// A page is for another instance than the first.
    #[error("snapshot page {number} is for instance {actual}, the first page for {expected}")]
    InstanceChanged {
        /// 1-based number of the page.
        number: u64,
        /// The first page's instance.
        expected: InstanceUuid,
        /// This page's instance.
        actual: InstanceUuid,
    },
    /// A page is at another cursor than the first: the directory changed while it was paged.
    #[error(
        "snapshot page {number} is at cursor {actual}, the first page at {expected}: the directory changed while it was paged; the next attempt starts again"
    )]
    CursorChanged {
        /// 1-based number of the page.
        number: u64,
        /// The first page's cursor.
        expected: i64,
        /// This page's cursor.
        actual: i64,
    },
    /// A page does not name the digest of the page before it (a stale, replayed or foreign
    /// page).
    #[error(
        "snapshot page {number} names previous page digest {named:?}, but the page received before it has digest {expected}"
    )]
    BrokenChain {
        /// 1-based number of the page.
        number: u64,
        /// The digest of the page received before it.
        expected: String,
        /// The digest it named.
        named: Option<String>,
    },
    /// Workspaces are not in strictly ascending uuid order (within a page or across pages).
    #[error(
        "snapshot page {number} has workspace {uuid} after {previous}: pages must list workspaces in strictly ascending uuid order"
    )]
    OutOfOrder {
        /// 1-based number of the page.
        number: u64,
        /// The workspace before it.
        previous: WorkspaceUuid,
        /// The workspace out of order.
        uuid: WorkspaceUuid,
    },
    /// The pages together are larger than the client reads for one snapshot.
    #[error(
        "the snapshot's pages total {size} bytes, more than the {limit} bytes allowed for one snapshot; raise the body cap or ask the provider for a smaller directory"
    )]
    TooLarge {
        /// Bytes received so far.
        size: u64,
        /// The cap, bytes.
        limit: u64,
    },
    /// A page without workspaces names a next page: a provider that could page forever.
    #[error(
        "snapshot page {number} holds no workspace but names a next page; only the last page may be empty"
    )]
    EmptyPage {
        /// 1-based number of the page.
        number: u64,
    },
    /// The snapshot was finished while a page was still announced.
    #[error("the snapshot was finished before its last page (page token {token:?} not fetched)")]
    Unfinished {
        /// The token not fetched.
        token: String,
    },
}

/// The digest a page names for the page before it: SHA-256 of the body exactly as received,
/// lowercase hex.
pub fn page_digest(body: &[u8]) -> String {
    Fingerprint::of_bytes(body).as_str().to_owned()
}

/// A snapshot being joined from its pages, in the order received.
#[derive(Debug, Clone)]
pub struct SnapshotPages {
    instance_uuid: InstanceUuid,
    cursor: i64,
    generated_at: DateTime<Utc>,
    workspaces: Vec<DirectoryWorkspace>,
    /// The last workspace of the pages so far (the next page must start above it).
    last_uuid: Option<WorkspaceUuid>,
    pages: u64,
    bytes: u64,
    limit: u64,
    last_digest: String,
    next_token: Option<String>,
}

impl SnapshotPages {
    /// Starts from the first answer, whose body (as received, `body_len` bytes) has digest
    /// `digest` ([`page_digest`]). `limit` caps the bytes of all pages together. An answer
    /// without page links is a whole snapshot: [`next_token`](Self::next_token) is then
    /// `None` and its workspaces may come in any order (the one-body form of the reference).
    ///
    /// # Errors
    /// [`PageError::FirstPageHasPrevious`], [`PageError::OutOfOrder`] (a paged answer only),
    /// [`PageError::TooLarge`].
    pub fn first(
        page: DirectorySnapshotPage,
        digest: String,
        body_len: u64,
        limit: u64,
    ) -> Result<Self, PageError> {
        let next_token = match &page.page {
            None => None,
            Some(link) => {
                if let Some(previous) = &link.previous_page_digest {
                    return Err(PageError::FirstPageHasPrevious {
                        digest: previous.clone(),
                    });
                }
                ascending(1, None, &page.workspaces)?;
                not_empty(1, &page.workspaces, link)?;
                link.next_page_token.clone()
            }
        };
        let mut workspaces = page.workspaces;
        fit(&mut workspaces);
        let pages = Self {
            instance_uuid: page.instance_uuid,
            cursor: page.cursor,
            generated_at: page.generated_at,
            last_uuid: workspaces.last().map(|w| w.uuid.clone()),
            workspaces,
            pages: 1,
            bytes: 0,
            limit,
            last_digest: digest,
            next_token,
        };
        pages.count(body_len)
    }

    /// The token of the page to fetch next; `None` when the snapshot is complete.
    pub fn next_token(&self) -> Option<&str> {
        self.next_token.as_deref()
    }

    /// The instance the first page named (every page must name it).
    pub fn instance_uuid(&self) -> &InstanceUuid {
        &self.instance_uuid
    }

    /// The cursor the first page named (every page must name it).
    pub fn cursor(&self) -> i64 {
        self.cursor
    }

    /// Pages received so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Bytes of the pages received so far (what counts against the cap).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds the next page (the answer to [`next_token`](Self::next_token)), whose body has
    /// digest `digest` and `body_len` bytes.
    ///
    /// # Errors
    /// The first broken rule: [`PageError::NotAPage`], [`PageError::InstanceChanged`],
    /// [`PageError::CursorChanged`], [`PageError::BrokenChain`], [`PageError::OutOfOrder`],
    /// [`PageError::TooLarge`].
    pub fn push(
        mut self,
        page: DirectorySnapshotPage,
        digest: String,
        body_len: u64,
    ) -> Result<Self, PageError> {
        let number = self.pages + 1;
        let Some(link) = page.page else {
            return Err(PageError::NotAPage { number });
        };
        if page.instance_uuid != self.instance_uuid {
            return Err(PageError::InstanceChanged {
                number,
                expected: self.instance_uuid,
                actual: page.instance_uuid,
            });
        }
        if page.cursor != self.cursor {
            return Err(PageError::CursorChanged {
                number,
                expected: self.cursor,
                actual: page.cursor,
            });
        }
        if link.previous_page_digest.as_deref() != Some(self.last_digest.as_str()) {
            return Err(PageError::BrokenChain {
                number,
                expected: self.last_digest,
                named: link.previous_page_digest,
            });
        }
        ascending(number, self.last_uuid.as_ref(), &page.workspaces)?;
        not_empty(number, &page.workspaces, &link)?;
        let mut workspaces = page.workspaces;
        fit(&mut workspaces);
        if let Some(last) = workspaces.last() {
            self.last_uuid = Some(last.uuid.clone());
        }
        self.workspaces.extend(workspaces);
        self.pages = number;
        self.last_digest = digest;
        self.next_token = link.next_page_token;
        self.count(body_len)
    }

    /// Hands over the workspaces of the pages so far (for a caller that keeps the pages
    /// elsewhere, e.g. spooled to a file); the checks of later pages go on as before, and
    /// [`finish`](Self::finish) then holds only the workspaces pushed since.
    pub fn take_workspaces(&mut self) -> Vec<DirectoryWorkspace> {
        std::mem::take(&mut self.workspaces)
    }

    /// The whole snapshot once the last page is in.
    ///
    /// # Errors
    /// [`PageError::Unfinished`] while a next page is announced.
    pub fn finish(self) -> Result<DirectorySnapshot, PageError> {
        if let Some(token) = self.next_token {
            return Err(PageError::Unfinished { token });
        }
        Ok(DirectorySnapshot {
            instance_uuid: self.instance_uuid,
            cursor: self.cursor,
            generated_at: self.generated_at,
            workspaces: self.workspaces,
        })
    }

    fn count(mut self, body_len: u64) -> Result<Self, PageError> {
        self.bytes = self.bytes.saturating_add(body_len);
        if self.bytes > self.limit {
            return Err(PageError::TooLarge {
                size: self.bytes,
                limit: self.limit,
            });
        }
        Ok(self)
    }
}

/// Gives back the room a parser left in each workspace's member list (a list grows by
/// doubling: 10 members sit in room for 16), which the joined snapshot would hold until the
/// apply ends.
fn fit(workspaces: &mut [DirectoryWorkspace]) {
    for workspace in workspaces {
        workspace.members.shrink_to_fit();
    }
}

/// Checks that a page naming a next page holds a workspace: every page but the last moves
/// the snapshot on, so a snapshot has at most one page per workspace, plus one.
fn not_empty(
    number: u64,
    workspaces: &[DirectoryWorkspace],
    link: &SnapshotPageLink,
) -> Result<(), PageError> {
    if workspaces.is_empty() && link.next_page_token.is_some() {
        return Err(PageError::EmptyPage { number });
    }
    Ok(())
}

/// Checks that `workspaces` are in strictly ascending uuid order, after `previous`.
fn ascending(
    number: u64,
    previous: Option<&WorkspaceUuid>,
    workspaces: &[DirectoryWorkspace],
) -> Result<(), PageError> {
    let mut previous = previous;
    for workspace in workspaces {
        if let Some(before) = previous
            && before >= &workspace.uuid
        {
            return Err(PageError::OutOfOrder {
                number,
                previous: before.clone(),
                uuid: workspace.uuid.clone(),
            });
        }
        previous = Some(&workspace.uuid);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
