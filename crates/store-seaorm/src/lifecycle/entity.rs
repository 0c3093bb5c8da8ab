//! Private SeaORM entities of `tenantry_control_spaces`, `tenantry_lifecycle_outbox`,
//! `tenantry_lifecycle_command_actions` (schema: migrations m0001, m0004..m0007), and
//! `tenantry_lifecycle_attempt_errors` (m0013).

pub mod control_space {
    //! `tenantry_control_spaces`.
    use sea_orm::entity::prelude::*;

    /// One row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_control_spaces")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub tenant_id: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub control_space_id: String,
        pub state: String,
        pub lifecycle_operation_id: String,
        pub resource_version: i64,
        pub provisioning_key: String,
        pub knowledge_space_id: Option<String>,
        pub knowledge_space_revision: i64,
        pub deletion_irreversible_at: Option<i64>,
        pub last_revoke_sequence: i64,
        pub created_at: i64,
        pub updated_at: i64,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod outbox {
    //! `tenantry_lifecycle_outbox`.
    use sea_orm::entity::prelude::*;

    /// One row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_lifecycle_outbox")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub tenant_id: String,
        pub control_space_id: String,
        pub operation_id: String,
        pub idempotency_key: String,
        pub request_fingerprint: String,
        pub operation: String,
        pub payload: String,
        pub status: String,
        pub attempt_count: i32,
        pub lease_owner: Option<String>,
        pub lease_expires_at: Option<i64>,
        pub lease_epoch: i64,
        pub next_attempt_at: i64,
        pub last_error_code: Option<String>,
        pub last_error_message: Option<String>,
        pub created_at: i64,
        pub completed_at: Option<i64>,
        pub attempt_window_ends_at: Option<i64>,
        pub prior_window_ends_at: Option<i64>,
        pub attempt_budget_base: i32,
        /// Set while the status is `failed` (gauge index only; not a domain field).
        pub failed_at: Option<i64>,
        /// The W3C `traceparent` intake recorded (m0015); `NULL` without one.
        pub trace_context: Option<String>,
        /// The command's turn, Unix ms (m0016): claims take due commands in turn order.
        pub turn_at: i64,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod action {
    //! `tenantry_lifecycle_command_actions`.
    use sea_orm::entity::prelude::*;

    /// One row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_lifecycle_command_actions")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub command_id: String,
        pub action: String,
        pub actor: String,
        pub reason: String,
        pub previous_status: String,
        pub previous_error_code: Option<String>,
        pub attempt_count: i32,
        pub created_at: i64,
    }

    /// No relations.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod attempt_error {
    //! `tenantry_lifecycle_attempt_errors` (migration m0013).
    use sea_orm::entity::prelude::*;

    /// One row.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_lifecycle_attempt_errors")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub command_id: String,
        pub attempt: i32,
        pub outcome: String,
        pub error_code: String,
        pub error_message: String,
        pub recorded_at: i64,
        pub lease_owner: Option<String>,
        pub actor: Option<String>,
    }

    /// No relations (the foreign key to the outbox is the schema's, for the cascade).
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
