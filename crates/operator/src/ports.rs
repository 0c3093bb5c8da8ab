//! The ports the operator front ends are handed, as trait objects: the app builds the stores
//! (SeaORM in `tenantry serve`) and hands them in as these; nothing in this crate names a
//! storage type.

use std::sync::Arc;

use tenantry_engine::lifecycle::CommandIntake;
use tenantry_engine::scoped_writes::ScopedWrites;
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings};
use tenantry_ports::lifecycle::{CommandAdmin, LifecycleStore};

/// The lifecycle store as the operator front ends use it: the queue, control-space and intake
/// ports ([`LifecycleStore`]) and the operator port ([`CommandAdmin`]: action log, counts,
/// detail reads). Every store with both is one.
pub trait OperatorStore: LifecycleStore + CommandAdmin + 'static {}

impl<T: LifecycleStore + CommandAdmin + 'static> OperatorStore for T {}

/// The shared handle of the lifecycle store the front ends read and act through.
pub type Store = Arc<dyn OperatorStore>;

/// Command intake (the admin API's writes) over [`Store`].
pub type Intake = CommandIntake<Store>;

/// Host storage as the fence administration uses it: the records ([`HostStorage`]) and the
/// bindings that have fences ([`HostStorageBindings`]).
pub trait FenceStorage: HostStorage + HostStorageBindings + 'static {}

impl<T: HostStorage + HostStorageBindings + 'static> FenceStorage for T {}

/// The process's scoped-writes runtime over [`FenceStorage`] (fence listing and clearing take
/// the same scope locks as its writers).
pub type Fences = ScopedWrites<dyn FenceStorage>;
