//! `Arc<T>`, `Box<T>` and `&T` handles of the host-storage ports.

use std::sync::Arc;

use serde_json::Value;
use tenantry_fence::Binding;

use crate::host_storage::{HostStorage, HostStorageBindings, HostStorageError, PrefixedRecord};

async_handles!(HostStorage {
    async fn now_ms(&self) -> Result<i64, HostStorageError> {
        (**self).now_ms().await
    }
    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError> {
        (**self).keys(binding).await
    }
    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError> {
        (**self).get(binding, key).await
    }
    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError> {
        (**self).set(binding, key, value).await
    }
    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError> {
        (**self)
            .compare_and_set(binding, key, expected, value)
            .await
    }
    fn get_now(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Option<Result<Option<Arc<Value>>, HostStorageError>> {
        (**self).get_now(binding, key)
    }
    fn compare_and_set_now(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Arc<Value>>,
        value: &Arc<Value>,
    ) -> Option<Result<bool, HostStorageError>> {
        (**self).compare_and_set_now(binding, key, expected, value)
    }
});

async_handles!(HostStorageBindings {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError> {
        (**self).bindings_with_key_prefix(key_prefix).await
    }
    async fn records_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError> {
        (**self).records_with_key_prefix(key_prefix).await
    }
});
