//! Migration: `tenantry_host_storage`, the durable installation-bound key/value store behind fences and
//! connector state.
//!
//! One row per `(binding, key)`; `value` is JSON text (`null` for a tombstone).

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, ensure_absent, ensure_no_unadopted_history, text, varchar};

const HOST_STORAGE: &str = "host_storage";

/// Creates `tenantry_host_storage` (after checking no table of that name exists).
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum HostStorage {
    Binding,
    Key,
    Value,
}

atomic_migration! {
    |manager|

    up {
        ensure_no_unadopted_history(manager, HOST_STORAGE, "m0002_host_storage").await?;
        let names = Naming::Prefixed;
        ensure_absent(
            manager,
            &names.table(HOST_STORAGE),
            crate::FENCES_HISTORY_TABLE,
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(HOST_STORAGE))
                    .col(varchar(HostStorage::Binding, 255))
                    .col(varchar(HostStorage::Key, 255))
                    .col(text(HostStorage::Value))
                    .primary_key(
                        Index::create()
                            .col(HostStorage::Binding)
                            .col(HostStorage::Key),
                    )
                    .to_owned(),
            )
            .await
    }

    down {
        let names = Naming::detect(manager, HOST_STORAGE).await?;
        manager
            .drop_table(Table::drop().table(names.iden(HOST_STORAGE)).to_owned())
            .await
    }
}
