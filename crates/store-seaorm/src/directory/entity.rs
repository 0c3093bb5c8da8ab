//! Private SeaORM entities of the directory tables (see `migrations::m0003_directory`).

pub mod account {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_accounts")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub uuid: String,
        pub normalized_email: String,
        #[sea_orm(column_type = "Text")]
        pub display_name: String,
        pub status: String,
        pub source: String,
        pub projection_revision: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod workspace {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_workspaces")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub uuid: String,
        pub source: String,
        pub instance_uuid: Option<String>,
        #[sea_orm(column_type = "Text")]
        pub name: String,
        #[sea_orm(column_type = "Text")]
        pub slug: String,
        #[sea_orm(column_type = "Text")]
        pub workspace_type: String,
        pub status: String,
        pub created_by_account_uuid: Option<String>,
        pub projection_revision: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod membership {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_workspace_memberships")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub uuid: String,
        pub workspace_uuid: String,
        pub account_uuid: String,
        pub role: String,
        pub status: String,
        pub joined_at: Option<i64>,
        pub projection_revision: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod execution {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_workspace_execution_state")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub workspace_uuid: String,
        pub source: String,
        pub instance_uuid: Option<String>,
        pub active_generation: i64,
        pub state: String,
        pub write_fenced: bool,
        pub desired_state_revision: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod state {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_directory_projection_state")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub instance_uuid: String,
        pub cursor: i64,
        pub snapshot_coverage_cursor: i64,
        pub snapshot_fingerprint: String,
        pub last_applied_at: i64,
        pub lease_expires_at: i64,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod inbox {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_directory_projection_inbox")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub instance_uuid: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub event_uuid: String,
        pub cursor: i64,
        pub event_type: String,
        pub revision: i64,
        pub fingerprint: String,
        pub received_at: i64,
        pub applied_at: Option<i64>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}
