//! The HTTP adapters are named from the crate root and built the same way: a config from
//! `Config::new(base_url, ...)` (plus public fields or `..` for the rest), then
//! `Client::new(&config)`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenantry_remote_http::{
    Answer, ClientBuildError, DirectoryClientConfig, DirectoryConfigError, DispatchError,
    HttpDirectoryProvider, HttpKnowledgeFs, KnowledgeFsConfig, KnowledgeFsConfigError,
    SignatureError, TrustedKeys, mutation_client,
};

#[test]
fn every_client_is_built_from_its_config() {
    let fs = HttpKnowledgeFs::new(&KnowledgeFsConfig::new("http://127.0.0.1:1/kfs", "token"));
    assert!(fs.is_ok());
    let refused: Result<HttpKnowledgeFs, KnowledgeFsConfigError> =
        HttpKnowledgeFs::new(&KnowledgeFsConfig::new("ftp://x", "token"));
    assert!(matches!(
        refused,
        Err(KnowledgeFsConfigError::InvalidBaseUrl { .. })
    ));
    let directory: Result<HttpDirectoryProvider, DirectoryConfigError> = HttpDirectoryProvider::new(
        &DirectoryClientConfig::new("http://127.0.0.1:1", TrustedKeys::new()),
    );
    assert_eq!(directory.unwrap_err(), DirectoryConfigError::NoTrustedKeys);
    let client: Result<reqwest::Client, ClientBuildError> = mutation_client(Duration::from_secs(1));
    assert!(client.is_ok());
    let _: Option<(Answer, DispatchError, SignatureError)> = None;
}
