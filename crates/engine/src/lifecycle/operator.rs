//! Operator actions on commands: retry or abandon one command, or every command matching a
//! filter, each action recorded (who, when, why) in the store's action log.
//!
//! The store's [`CommandAdmin::act_on_command`] is the compare-and-set; this use case
//! validates the request, stamps it with the clock and a fresh action id, and pages through a
//! filter for bulk actions. A command that is not `pending` or `failed` is refused and left
//! unchanged; in a bulk action the refusals are reported per command and the others still act.

use std::sync::Arc;

use tenantry_kernel::CommandId;
use tenantry_lifecycle::{CommandRecord, CommandStatus};
use tenantry_ports::lifecycle::{
    CommandAdmin, CommandFilter, CommandQueue, OperatorAction, OperatorActionError,
    OperatorActionKind, StoreError,
};

use super::Clock;

/// Longest accepted `actor`, in characters.
pub const MAX_ACTOR_CHARS: usize = 255;
/// Longest accepted `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 1024;
/// Most commands one bulk action touches; narrow the filter for more.
pub const MAX_BULK: usize = 10_000;
/// Page size used while walking a filter.
const PAGE: u32 = 500;

/// Why an operator request was refused as a whole; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorRequestError {
    /// `actor` or `reason` is empty or too long; fix it and resend.
    #[error("{field} is invalid: {reason}")]
    InvalidField {
        /// `actor` or `reason`.
        field: &'static str,
        /// The rule it breaks.
        reason: String,
    },
    /// A bulk action needs a status filter of `pending` or `failed` (only those can be acted
    /// on), so it never walks the whole history.
    #[error(
        "a bulk {action} needs status=pending or status=failed (got {got}); only pending or failed commands can be acted on"
    )]
    BulkStatusRequired {
        /// `retry` or `abandon`.
        action: &'static str,
        /// The status given, or `none`.
        got: String,
    },
    /// A confirmed bulk action named no command, or more than [`MAX_BULK`].
    #[error(
        "command_ids names {got} commands; a confirmed bulk action names 1 to {max} (confirm the oldest {max} and run it again for the rest)"
    )]
    ConfirmedCount {
        /// How many distinct ids were given.
        got: usize,
        /// [`MAX_BULK`].
        max: usize,
    },
    /// The single action was refused (unknown command, not pending/failed).
    #[error(transparent)]
    Refused(#[from] OperatorActionError),
    /// Storage failed while listing the matching commands.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a bulk action did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkReport {
    /// Commands acted on, as they are after the action.
    pub acted: Vec<CommandRecord>,
    /// Commands that matched but were refused (e.g. claimed meanwhile), with why.
    pub refused: Vec<(CommandId, OperatorActionError)>,
    /// Whether [`MAX_BULK`] stopped the walk before the filter was exhausted.
    pub truncated: bool,
    /// Confirmed commands left untouched because they no longer match the filter (or no
    /// longer exist) when the action reached them ([`OperatorActions::act_on_confirmed`]).
    pub skipped: Vec<CommandId>,
}

/// Operator retry / abandon over a store.
pub struct OperatorActions<S> {
    store: S,
    clock: Arc<dyn Clock>,
    new_id: Arc<dyn Fn() -> String + Send + Sync>,
}

impl<S> std::fmt::Debug for OperatorActions<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorActions").finish_non_exhaustive()
    }
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), OperatorRequestError> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(OperatorRequestError::InvalidField {
            field,
            reason: format!("{field} must not be empty; say who acts and why"),
        });
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(OperatorRequestError::InvalidField {
            field,
            reason: format!("{chars} characters; at most {max}"),
        });
    }
    Ok(())
}

impl<S: CommandQueue + CommandAdmin> OperatorActions<S> {
    /// Actions over `store`, stamped by `clock`, with UUID v4 action ids.
    pub fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            new_id: Arc::new(|| uuid::Uuid::new_v4().to_string()),
        }
    }

    fn action(
        &self,
        command_id: CommandId,
        kind: OperatorActionKind,
        actor: &str,
        reason: &str,
    ) -> OperatorAction {
        OperatorAction {
            action_id: (self.new_id)(),
            command_id,
            kind,
            actor: actor.trim().to_owned(),
            reason: reason.trim().to_owned(),
            at: self.clock.now(),
        }
    }

    /// Retries or abandons one command.
    ///
    /// # Errors
    /// [`OperatorRequestError::InvalidField`] for an empty or overlong actor / reason;
    /// [`OperatorRequestError::Refused`] for an unknown command or one that is not pending or
    /// failed (nothing written, nothing recorded).
    pub async fn act(
        &self,
        command_id: &CommandId,
        kind: OperatorActionKind,
        actor: &str,
        reason: &str,
    ) -> Result<CommandRecord, OperatorRequestError> {
        check_text("actor", actor, MAX_ACTOR_CHARS)?;
        check_text("reason", reason, MAX_REASON_CHARS)?;
        let action = self.action(command_id.clone(), kind, actor, reason);
        Ok(self.store.act_on_command(&action).await?)
    }

    /// Retries or abandons every command matching `filter` (its `limit` and `after` are
    /// ignored), at most [`MAX_BULK`], oldest first. The filter must select status `pending`
    /// or `failed`.
    ///
    /// # Errors
    /// [`OperatorRequestError::InvalidField`], [`OperatorRequestError::BulkStatusRequired`]
    /// (nothing written); [`OperatorRequestError::Store`] when listing fails (the actions taken
    /// before it stay; each is recorded).
    pub async fn act_on_matching(
        &self,
        filter: &CommandFilter,
        kind: OperatorActionKind,
        actor: &str,
        reason: &str,
    ) -> Result<BulkReport, OperatorRequestError> {
        self.act_on_matching_up_to(filter, kind, actor, reason, MAX_BULK)
            .await
    }

    /// [`Self::act_on_matching`], acting on at most `bound` commands (itself at most
    /// [`MAX_BULK`]); `truncated` is set when more matched. The console passes the count its
    /// confirmation stated, so a confirmed bulk action never touches more commands than the
    /// operator was shown.
    ///
    /// # Errors
    /// As [`Self::act_on_matching`].
    pub async fn act_on_matching_up_to(
        &self,
        filter: &CommandFilter,
        kind: OperatorActionKind,
        actor: &str,
        reason: &str,
        bound: usize,
    ) -> Result<BulkReport, OperatorRequestError> {
        let bound = bound.min(MAX_BULK);
        check_bulk(filter, kind, actor, reason)?;
        let mut page = CommandFilter {
            limit: PAGE,
            after: None,
            ..filter.clone()
        };
        let mut report = BulkReport::default();
        let mut seen = 0usize;
        loop {
            let rows = self.store.list_commands(&page).await?;
            let full = rows.len() == PAGE as usize;
            page.after = rows.last().map(|r| r.id.clone());
            for row in rows {
                if seen == bound {
                    report.truncated = true;
                    return Ok(report);
                }
                seen += 1;
                let action = self.action(row.id.clone(), kind, actor, reason);
                match self.store.act_on_command(&action).await {
                    Ok(after) => report.acted.push(after),
                    Err(OperatorActionError::Store(e)) => return Err(e.into()),
                    Err(refused) => report.refused.push((row.id, refused)),
                }
            }
            if !full {
                return Ok(report);
            }
        }
    }

    /// Retries or abandons exactly the commands an operator confirmed: each of `command_ids`
    /// (duplicates count once) is read again and acted on only if it still matches `filter`
    /// (its cursors and limit are ignored); one that no longer matches, or no longer exists,
    /// is left untouched and listed in [`BulkReport::skipped`]. A command that started
    /// matching after the confirmation is never touched, since only the named ids are read.
    /// Ids are taken in the order given. The match is checked just before the store's
    /// compare-and-set, which still refuses a command that is no longer pending or failed.
    ///
    /// # Errors
    /// [`OperatorRequestError::InvalidField`], [`OperatorRequestError::BulkStatusRequired`],
    /// [`OperatorRequestError::ConfirmedCount`] (nothing written);
    /// [`OperatorRequestError::Store`] when reading fails (the actions taken before it stay).
    pub async fn act_on_confirmed(
        &self,
        filter: &CommandFilter,
        command_ids: &[CommandId],
        kind: OperatorActionKind,
        actor: &str,
        reason: &str,
    ) -> Result<BulkReport, OperatorRequestError> {
        check_bulk(filter, kind, actor, reason)?;
        let mut seen = std::collections::HashSet::new();
        let ids: Vec<&CommandId> = command_ids.iter().filter(|id| seen.insert(*id)).collect();
        if ids.is_empty() || ids.len() > MAX_BULK {
            return Err(OperatorRequestError::ConfirmedCount {
                got: ids.len(),
                max: MAX_BULK,
            });
        }
        let mut report = BulkReport::default();
        for id in ids {
            let still = self.store.command_by_id(id).await?;
            if !still.is_some_and(|r| filter.matches(&r)) {
                report.skipped.push(id.clone());
                continue;
            }
            let action = self.action(id.clone(), kind, actor, reason);
            match self.store.act_on_command(&action).await {
                Ok(after) => report.acted.push(after),
                Err(OperatorActionError::Store(e)) => return Err(e.into()),
                Err(refused) => report.refused.push((id.clone(), refused)),
            }
        }
        Ok(report)
    }
}

/// The checks every bulk action makes before touching anything: actor and reason, and a
/// status filter of `pending` or `failed`.
fn check_bulk(
    filter: &CommandFilter,
    kind: OperatorActionKind,
    actor: &str,
    reason: &str,
) -> Result<(), OperatorRequestError> {
    check_text("actor", actor, MAX_ACTOR_CHARS)?;
    check_text("reason", reason, MAX_REASON_CHARS)?;
    if !filter
        .status
        .is_some_and(CommandStatus::accepts_operator_action)
    {
        return Err(OperatorRequestError::BulkStatusRequired {
            action: kind.as_str(),
            got: filter
                .status
                .map_or_else(|| "none".to_owned(), |s| s.to_string()),
        });
    }
    Ok(())
}
