//! `docs/openapi/admin-v1.json` is what the admin API's handlers and types generate (and what
//! `tenantry serve` answers at `/openapi.json`, see `admin_api.rs`). After changing a handler
//! or an answer type, regenerate the file with
//! `UPDATE_OPENAPI=1 cargo test -p tenantry-app --test openapi` and commit it.

#[test]
fn committed_admin_document_is_generated_from_the_types() {
    tenantry_testkit::openapi::check_committed(
        "admin-v1.json",
        &tenantry_app::admin::document_json(),
        "UPDATE_OPENAPI=1 cargo test -p tenantry-app --test openapi",
    );
}
