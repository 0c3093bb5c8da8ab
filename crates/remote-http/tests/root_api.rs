//! The HTTP adapters are named from the crate root and built the same way: a config from
//! `Config::new(base_url, ...)` (plus public fields or `..` for the rest), then
//! `Client::new(&config)`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tenantry_remote_http::{
    Answer, ClientBuildError, DirectoryClientConfig, DirectoryConfigError, HttpDirectoryProvider,
    HttpKnowledgeFs, KnowledgeFsConfig, KnowledgeFsConfigError, RemoteTls, SignatureError,
    TlsConfigError, TransportError, TrustedKeys, mutation_client,
};

#[test]
fn every_client_is_built_from_its_config() {
    let fs = HttpKnowledgeFs::new(&KnowledgeFsConfig::new("http://127.0.0.1:1/kfs", "token"));
    assert!(fs.is_ok());
    let refused: Result<HttpKnowledgeFs, KnowledgeFsConfigError> =
        HttpKnowledgeFs::new(&KnowledgeFsConfig::new("ftp://x", "token"));
    assert!(matches!(
        refused,
        Err(KnowledgeFsConfigError::InvalidBaseUrl { source: None, .. })
    ));
    // A URL that does not parse keeps the parser's error.
    let unparsable = HttpKnowledgeFs::new(&KnowledgeFsConfig::new("not a url", "token"))
        .map(|_| ())
        .unwrap_err();
    assert!(
        std::error::Error::source(&unparsable).is_some(),
        "{unparsable:?}"
    );
    let directory: Result<HttpDirectoryProvider, DirectoryConfigError> = HttpDirectoryProvider::new(
        &DirectoryClientConfig::new("http://127.0.0.1:1", TrustedKeys::new()),
    );
    assert_eq!(directory.unwrap_err(), DirectoryConfigError::NoTrustedKeys);
    let client: Result<reqwest::Client, ClientBuildError> =
        mutation_client(Duration::from_secs(1), &RemoteTls::default());
    assert!(client.is_ok());
    let _: Option<(Answer, TransportError, SignatureError, TlsConfigError)> = None;
}

#[test]
fn config_setters_change_only_their_field() {
    let fs = KnowledgeFsConfig::new("http://h", "t")
        .with_deadline(Duration::from_secs(3))
        .with_max_concurrent_calls(9)
        .with_max_body_bytes(10);
    assert_eq!(
        fs,
        KnowledgeFsConfig {
            deadline: Duration::from_secs(3),
            max_concurrent_calls: 9,
            max_body_bytes: 10,
            ..KnowledgeFsConfig::new("http://h", "t")
        }
    );
    assert!(matches!(
        HttpKnowledgeFs::new(&fs.clone().with_max_concurrent_calls(0)),
        Err(KnowledgeFsConfigError::ZeroConcurrency)
    ));
    let directory = DirectoryClientConfig::new("http://h", TrustedKeys::new())
        .with_bearer_token("b")
        .with_max_skew(Duration::from_secs(1))
        .with_max_response_bytes(2)
        .with_deadline(Duration::from_secs(3));
    assert_eq!(
        directory,
        DirectoryClientConfig {
            bearer_token: Some("b".into()),
            max_skew: Duration::from_secs(1),
            max_response_bytes: 2,
            deadline: Duration::from_secs(3),
            ..DirectoryClientConfig::new("http://h", TrustedKeys::new())
        }
    );
}
