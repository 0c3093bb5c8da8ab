//! The method lists of the host-storage ports, for forwarding and the handles.

use std::sync::Arc;

use serde_json::Value;
use tenantry_fence::Binding;

use crate::host_storage::{HostStorageError, PrefixedRecord};

forwarding!(host_storage::HostStorage {
    async fn now_ms(&self) -> Result<i64, HostStorageError>;
    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError>;
    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError>;
    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError>;
    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError>;
    fn get_now(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Option<Result<Option<Arc<Value>>, HostStorageError>>;
    fn compare_and_set_now(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Arc<Value>>,
        value: &Arc<Value>,
    ) -> Option<Result<bool, HostStorageError>>;
});

forwarding!(host_storage::HostStorageBindings {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError>;
    async fn records_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError>;
});
