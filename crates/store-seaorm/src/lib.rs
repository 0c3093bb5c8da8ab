//! SeaORM adapters implementing the Tenantry storage ports on SQLite and PostgreSQL.
