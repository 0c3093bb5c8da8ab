//! The OpenAPI documents in `docs/openapi/` are what the types generate and what the reference
//! servers serve. After changing a handler or a wire type, regenerate the files with
//! `UPDATE_OPENAPI=1 cargo test -p tenantry-testkit --test openapi` and commit them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use tenantry_directory::InstanceUuid;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::knowledge_fs::{PATHS, ReferenceRemote, RemoteConfig};

fn doc_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/openapi")
        .join(name)
}

fn doc_file(name: &str) -> String {
    let path = doc_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fails when the committed file differs from `generated`; with `UPDATE_OPENAPI=1` rewrites
/// the file instead.
fn check_committed(name: &str, generated: &str) {
    tenantry_testkit::openapi::check_committed(
        name,
        generated,
        "UPDATE_OPENAPI=1 cargo test -p tenantry-testkit --test openapi",
    );
}

#[test]
fn committed_knowledgefs_document_is_generated_from_the_types() {
    check_committed(
        "knowledgefs-v1.json",
        &tenantry_testkit::openapi::knowledge_fs_v1(),
    );
}

#[test]
fn committed_directory_document_is_generated_from_the_types() {
    check_committed(
        "directory-v1.json",
        &tenantry_testkit::openapi::directory_v1(),
    );
}

#[tokio::test]
async fn served_openapi_matches_the_knowledgefs_file() {
    let (url, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let response = get(format!("{url}/openapi.json")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/json"
    );
    let served = response.text().await.unwrap();
    assert_eq!(served, doc_file("knowledgefs-v1.json"));
    remote.shutdown().await;
}

#[tokio::test]
async fn served_openapi_matches_the_directory_file() {
    let config = DirectoryServerConfig::new(InstanceUuid::parse("inst-1").unwrap());
    let (url, dir) = ReferenceDirectory::start(config).await.unwrap();
    let served = get(format!("{url}/openapi.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(served, doc_file("directory-v1.json"));
    dir.shutdown().await;
}

fn documented_routes(file: &str) -> BTreeSet<(String, String)> {
    tenantry_testkit::openapi::documented_routes(&doc_file(file))
}

#[test]
fn knowledgefs_openapi_documents_exactly_the_served_routes() {
    let served: BTreeSet<(String, String)> = PATHS
        .iter()
        .map(|(method, path, _)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(documented_routes("knowledgefs-v1.json"), served);
}

#[test]
fn directory_openapi_documents_exactly_the_served_routes() {
    let served: BTreeSet<(String, String)> = tenantry_testkit::directory::PATHS
        .iter()
        .map(|(method, path, _)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(documented_routes("directory-v1.json"), served);
}

#[test]
fn every_documented_operation_declares_its_errors_and_auth() {
    let doc: serde_json::Value = serde_json::from_str(&doc_file("knowledgefs-v1.json")).unwrap();
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            for status in ["400", "401", "429", "503"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {path} lacks {status}"
                );
            }
            let params: Vec<&str> = op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["$ref"].as_str())
                .collect();
            let has_idem = params.contains(&"#/components/parameters/IdempotencyKey");
            assert_eq!(
                has_idem,
                method == "post",
                "{method} {path}: Idempotency-Key on mutations only"
            );
            if method == "post" {
                assert!(responses.contains_key("422"), "{method} {path} lacks 422");
            }
        }
    }
}

/// `reqwest::get` with rustls's ring provider installed first (reqwest is built without a
/// default crypto provider in this workspace).
async fn get(url: String) -> reqwest::Result<reqwest::Response> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::get(url).await
}
