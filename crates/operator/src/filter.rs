//! The command filter of the operator's front doors: `GET /v1/commands` and the bulk bodies of
//! `POST /v1/commands/retry|abandon` (admin API), the commands table and its bulk confirmation
//! and action (console), `tenantry commands list` and `tenantry commands retry|abandon` (CLI).
//! Each fills a [`CommandFilterInput`] with the text it received and calls
//! [`CommandFilterInput::page`] (a listing) or [`CommandFilterInput::selection`] (an action on
//! every match), so they accept exactly the same values and refuse the rest with the same
//! reason.

use tenantry_kernel::{CommandId, ControlSpaceId, IdError, TenantId};
use tenantry_lifecycle::{CommandStatus, ErrorCode, Operation};
use tenantry_ports::lifecycle::CommandFilter;

/// Page size of a listing without `limit`.
pub const DEFAULT_PAGE: u32 = 100;
/// Largest page size of a listing (`limit` is 1..=`MAX_PAGE`).
pub const MAX_PAGE: u32 = 1000;

/// The command filter as an operator typed it: each field the text received, `None` when not
/// given. An empty status, operation or error code means "any"; the other fields must parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandFilterInput {
    /// `pending`, `processing`, `succeeded`, `superseded`, `failed` or `abandoned`.
    pub status: Option<String>,
    /// `provision`, `delete` or `revoke`.
    pub operation: Option<String>,
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this control space (requires `tenant_id`).
    pub control_space_id: Option<String>,
    /// Only commands whose last error code is exactly this.
    pub error_code: Option<String>,
    /// Listing only: page size (1..=[`MAX_PAGE`], default [`DEFAULT_PAGE`]).
    pub limit: Option<u32>,
    /// Listing only: keyset cursor, the id of the last command of the previous page.
    pub after: Option<String>,
    /// Listing only: keyset cursor backwards, the id of the first command of the next page
    /// (ignored with `after`).
    pub before: Option<String>,
}

/// The field of a [`CommandFilterInput`] a [`FilterError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterField {
    /// [`CommandFilterInput::status`].
    Status,
    /// [`CommandFilterInput::operation`].
    Operation,
    /// [`CommandFilterInput::tenant_id`].
    TenantId,
    /// [`CommandFilterInput::control_space_id`].
    ControlSpaceId,
    /// [`CommandFilterInput::limit`].
    Limit,
    /// [`CommandFilterInput::after`].
    After,
    /// [`CommandFilterInput::before`].
    Before,
}

impl FilterField {
    /// The field's name as the admin API and the console spell it (`status`, `operation`,
    /// `tenant_id`, `control_space_id`, `limit`, `after`, `before`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Operation => "operation",
            Self::TenantId => "tenant_id",
            Self::ControlSpaceId => "control_space_id",
            Self::Limit => "limit",
            Self::After => "after",
            Self::Before => "before",
        }
    }
}

/// A filter refused: which field, and why (a sentence without the field's name, so each front
/// end names the field its own way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is invalid: {reason}", field.name())]
pub struct FilterError {
    /// The field refused.
    pub field: FilterField,
    /// Why.
    pub reason: String,
}

impl FilterError {
    fn new(field: FilterField, reason: impl std::fmt::Display) -> Self {
        Self {
            field,
            reason: reason.to_string(),
        }
    }
}

fn id<T>(
    field: FilterField,
    value: Option<&str>,
    parse: impl FnOnce(String) -> Result<T, IdError>,
) -> Result<Option<T>, FilterError> {
    value
        .map(|v| parse(v.to_owned()).map_err(|e| FilterError::new(field, e)))
        .transpose()
}

impl CommandFilterInput {
    /// The store filter of an action on every matching command: status, operation, tenant,
    /// control space and error code; no cursors, limit 0 (the action's own bound applies).
    /// `limit`, `after` and `before` are not read.
    ///
    /// # Errors
    /// [`FilterError`] for the first field that does not parse, in the order status,
    /// operation, tenant, control space (also when it is given without the tenant).
    pub fn selection(&self) -> Result<CommandFilter, FilterError> {
        let status = match self.status.as_deref() {
            None | Some("") => None,
            Some(s) => Some(CommandStatus::parse(s).ok_or_else(|| {
                FilterError::new(
                    FilterField::Status,
                    format!(
                        "{s:?} is not one of pending, processing, succeeded, superseded, failed, abandoned"
                    ),
                )
            })?),
        };
        let operation = match self.operation.as_deref() {
            None | Some("") => None,
            Some(o) => match Operation::parse(o) {
                Operation::Unsupported(_) => {
                    return Err(FilterError::new(
                        FilterField::Operation,
                        format!("{o:?} is not one of provision, delete, revoke"),
                    ));
                }
                known => Some(known),
            },
        };
        let tenant_id = id(
            FilterField::TenantId,
            self.tenant_id.as_deref(),
            TenantId::parse,
        )?;
        let control_space_id = id(
            FilterField::ControlSpaceId,
            self.control_space_id.as_deref(),
            ControlSpaceId::parse,
        )?;
        if control_space_id.is_some() && tenant_id.is_none() {
            return Err(FilterError::new(
                FilterField::ControlSpaceId,
                "filtering by control space requires tenant_id",
            ));
        }
        Ok(CommandFilter {
            status,
            operation,
            tenant_id,
            control_space_id,
            error_code: self
                .error_code
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(ErrorCode::from),
            after: None,
            before: None,
            limit: 0,
        })
    }

    /// The store filter of one page of a listing: [`Self::selection`], then the page size and
    /// the keyset cursors (`before` only when there is no `after`).
    ///
    /// # Errors
    /// [`FilterError`] as [`Self::selection`], then for a `limit` outside 1..=[`MAX_PAGE`] or
    /// a cursor that is not a command id.
    pub fn page(&self) -> Result<CommandFilter, FilterError> {
        let mut filter = self.selection()?;
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(FilterError::new(
                FilterField::Limit,
                format!("{limit} is outside 1..={MAX_PAGE}"),
            ));
        }
        filter.limit = limit;
        filter.after = id(FilterField::After, self.after.as_deref(), CommandId::parse)?;
        if filter.after.is_none() {
            filter.before = id(
                FilterField::Before,
                self.before.as_deref(),
                CommandId::parse,
            )?;
        }
        Ok(filter)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn input() -> CommandFilterInput {
        CommandFilterInput::default()
    }

    #[test]
    fn an_empty_input_selects_everything_and_pages_by_the_default() {
        let selection = input().selection().unwrap();
        assert_eq!(selection, CommandFilter::default());
        let page = input().page().unwrap();
        assert_eq!(page.limit, DEFAULT_PAGE);
        assert_eq!((page.after, page.before), (None, None));
    }

    #[test]
    fn every_field_parses_into_the_store_filter() {
        let filter = CommandFilterInput {
            status: Some("failed".into()),
            operation: Some("delete".into()),
            tenant_id: Some("t-1".into()),
            control_space_id: Some("cs-1".into()),
            error_code: Some("KFS_UNAVAILABLE".into()),
            limit: Some(7),
            after: Some("c-1".into()),
            before: Some("c-9".into()),
        }
        .page()
        .unwrap();
        assert_eq!(filter.status, Some(CommandStatus::Failed));
        assert_eq!(filter.operation, Some(Operation::Delete));
        assert_eq!(filter.tenant_id.unwrap().as_str(), "t-1");
        assert_eq!(filter.control_space_id.unwrap().as_str(), "cs-1");
        assert_eq!(filter.error_code.unwrap().as_str(), "KFS_UNAVAILABLE");
        assert_eq!(filter.limit, 7);
        assert_eq!(filter.after.unwrap().as_str(), "c-1");
        // `before` is ignored with `after`
        assert_eq!(filter.before, None);
    }

    #[test]
    fn empty_status_operation_and_error_code_mean_any() {
        let filter = CommandFilterInput {
            status: Some(String::new()),
            operation: Some(String::new()),
            error_code: Some(String::new()),
            ..input()
        }
        .selection()
        .unwrap();
        assert_eq!(filter, CommandFilter::default());
    }

    #[test]
    fn a_selection_reads_no_paging_field() {
        let filter = CommandFilterInput {
            limit: Some(0),
            after: Some(" not an id ".into()),
            ..input()
        }
        .selection()
        .unwrap();
        assert_eq!((filter.limit, filter.after), (0, None));
    }

    #[test]
    fn each_refusal_names_its_field() {
        let refused = |input: CommandFilterInput| input.page().unwrap_err();
        let cases = [
            (
                CommandFilterInput {
                    status: Some("done".into()),
                    ..input()
                },
                FilterField::Status,
                "\"done\" is not one of pending, processing, succeeded, superseded, failed, abandoned",
            ),
            (
                CommandFilterInput {
                    operation: Some("explode".into()),
                    ..input()
                },
                FilterField::Operation,
                "\"explode\" is not one of provision, delete, revoke",
            ),
            (
                CommandFilterInput {
                    control_space_id: Some("cs-1".into()),
                    ..input()
                },
                FilterField::ControlSpaceId,
                "filtering by control space requires tenant_id",
            ),
            (
                CommandFilterInput {
                    limit: Some(0),
                    ..input()
                },
                FilterField::Limit,
                "0 is outside 1..=1000",
            ),
            (
                CommandFilterInput {
                    limit: Some(MAX_PAGE + 1),
                    ..input()
                },
                FilterField::Limit,
                "1001 is outside 1..=1000",
            ),
        ];
        for (input, field, reason) in cases {
            let error = refused(input);
            assert_eq!((error.field, error.reason.as_str()), (field, reason));
        }
        for (input, field) in [
            (
                CommandFilterInput {
                    tenant_id: Some("a b".into()),
                    ..input()
                },
                FilterField::TenantId,
            ),
            (
                CommandFilterInput {
                    tenant_id: Some("t-1".into()),
                    control_space_id: Some(String::new()),
                    ..input()
                },
                FilterField::ControlSpaceId,
            ),
            (
                CommandFilterInput {
                    after: Some("a b".into()),
                    ..input()
                },
                FilterField::After,
            ),
            (
                CommandFilterInput {
                    before: Some("a b".into()),
                    ..input()
                },
                FilterField::Before,
            ),
        ] {
            assert_eq!(refused(input).field, field);
        }
        assert_eq!(
            refused(CommandFilterInput {
                limit: Some(0),
                ..input()
            })
            .to_string(),
            "limit is invalid: 0 is outside 1..=1000"
        );
    }
}
