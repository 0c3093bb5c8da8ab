//! The id of a control space created without one: derived from the tenant and the request's
//! idempotency key, so a replay of the request names the same control space.

use tenantry_kernel::{Fingerprint, TenantId};

/// The id of a control space created without one: `cs-` plus the first 32 hex digits of
/// SHA-256 of `"{tenant}\n{idempotency key}"`, so a replay with the same key names the same
/// space and two tenants using the same key name different spaces. The result is always a
/// valid control-space id (35 ASCII characters).
pub fn derived_control_space_id(tenant: &TenantId, idempotency_key: &str) -> String {
    let digest = Fingerprint::of_bytes(format!("{tenant}\n{idempotency_key}").as_bytes());
    format!("cs-{}", &digest.as_str()[..32])
}

#[cfg(test)]
mod tests {
    use tenantry_kernel::ControlSpaceId;

    use super::*;

    /// (tenant, idempotency key, derived id): pinned, since stored control spaces carry them
    /// and a replay after an upgrade must still name the same space.
    const TABLE: [(&str, &str, &str); 4] = [
        ("t-a", "key-1", "cs-2a090e50ba348dcc7780296dd6b07152"),
        ("t-a", "key-2", "cs-9176553a24443590b0c1df58a9c7167a"),
        ("t-b", "key-1", "cs-1f44e039be1fa68cdd75ab27d8a890ea"),
        (
            "tenant-7",
            "6f1c-replay",
            "cs-b44ed446f2a8a9601ab90309dcd53bbc",
        ),
    ];

    #[test]
    fn derived_ids_match_the_table() {
        for (tenant, key, expected) in TABLE {
            let tenant = TenantId::parse(tenant).unwrap();
            assert_eq!(derived_control_space_id(&tenant, key), expected, "{key}");
        }
    }

    #[test]
    fn derived_control_space_id_is_stable_per_tenant_and_key() {
        let a = TenantId::parse("t-a").unwrap();
        let b = TenantId::parse("t-b").unwrap();
        let id = derived_control_space_id(&a, "key-1");
        assert_eq!(id, derived_control_space_id(&a, "key-1"));
        assert_ne!(id, derived_control_space_id(&a, "key-2"));
        assert_ne!(id, derived_control_space_id(&b, "key-1"));
        assert!(id.starts_with("cs-") && id.len() == 35, "{id}");
        assert!(ControlSpaceId::parse(id.as_str()).is_ok(), "{id}");
    }
}
