//! Constructors of the intake requests: `new` takes the fields every request needs, `with_*`
//! sets an optional one. Struct literals still work; these keep a caller's code compiling when
//! an optional field is added.

use serde_json::Value;
use tenantry_kernel::{ControlSpaceId, GrantId, IdempotencyKey, TenantId};

use crate::intake::{CreateControlSpace, RequestDeletion, RequestRevocation};

impl CreateControlSpace {
    /// A request to create `control_space_id` of `tenant_id` named `name` (short name `slug`),
    /// idempotent on `idempotency_key`; no icon, an empty description and no intents until set
    /// with the `with_*` methods. Nothing is validated here: `plan` (or the engine's intake)
    /// refuses an empty or oversized name, slug or icon.
    pub fn new(
        tenant_id: TenantId,
        control_space_id: ControlSpaceId,
        idempotency_key: IdempotencyKey,
        name: impl Into<String>,
        slug: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id,
            control_space_id,
            idempotency_key,
            name: name.into(),
            slug: slug.into(),
            icon: String::new(),
            description: String::new(),
            model_intent: None,
            profile_intent: None,
        }
    }

    /// Sets the icon reference (at most 255 characters).
    #[must_use]
    pub fn with_icon(mut self, icon: impl Into<String>) -> Self {
        self.icon = icon.into();
        self
    }

    /// Sets the description (bounded by the 64 KiB payload limit).
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the model intent sent to KnowledgeFS.
    #[must_use]
    pub fn with_model_intent(mut self, intent: Value) -> Self {
        self.model_intent = Some(intent);
        self
    }

    /// Sets the profile intent sent to KnowledgeFS.
    #[must_use]
    pub fn with_profile_intent(mut self, intent: Value) -> Self {
        self.profile_intent = Some(intent);
        self
    }
}

impl RequestDeletion {
    /// A request to delete `control_space_id` of `tenant_id`, idempotent on `idempotency_key`.
    pub fn new(
        tenant_id: TenantId,
        control_space_id: ControlSpaceId,
        idempotency_key: IdempotencyKey,
    ) -> Self {
        Self {
            tenant_id,
            control_space_id,
            idempotency_key,
        }
    }
}

impl RequestRevocation {
    /// A request to revoke `grant_id` on the knowledge space of `control_space_id` of
    /// `tenant_id` because of `reason_code` (1..=255 characters, checked by `plan`), idempotent
    /// on `idempotency_key`.
    pub fn new(
        tenant_id: TenantId,
        control_space_id: ControlSpaceId,
        grant_id: GrantId,
        reason_code: impl Into<String>,
        idempotency_key: IdempotencyKey,
    ) -> Self {
        Self {
            tenant_id,
            control_space_id,
            grant_id,
            reason_code: reason_code.into(),
            idempotency_key,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn ids() -> (TenantId, ControlSpaceId, IdempotencyKey) {
        (
            TenantId::parse("t1").unwrap(),
            ControlSpaceId::parse("cs1").unwrap(),
            IdempotencyKey::parse("k1").unwrap(),
        )
    }

    #[test]
    fn create_builder_sets_required_and_optional_fields() {
        let (t, cs, k) = ids();
        let built = CreateControlSpace::new(t.clone(), cs.clone(), k.clone(), "Name", "slug")
            .with_icon("icon")
            .with_description("about")
            .with_model_intent(json!({"m": 1}))
            .with_profile_intent(json!({"p": 2}));
        let literal = CreateControlSpace {
            tenant_id: t,
            control_space_id: cs,
            idempotency_key: k,
            name: "Name".into(),
            slug: "slug".into(),
            icon: "icon".into(),
            description: "about".into(),
            model_intent: Some(json!({"m": 1})),
            profile_intent: Some(json!({"p": 2})),
        };
        assert_eq!(built, literal);
        let bare = CreateControlSpace::new(
            literal.tenant_id.clone(),
            literal.control_space_id.clone(),
            literal.idempotency_key.clone(),
            "Name",
            "slug",
        );
        assert_eq!((bare.icon.as_str(), bare.description.as_str()), ("", ""));
        assert_eq!((bare.model_intent, bare.profile_intent), (None, None));
    }

    #[test]
    fn deletion_and_revocation_builders_fill_every_field() {
        let (t, cs, k) = ids();
        let deletion = RequestDeletion::new(t.clone(), cs.clone(), k.clone());
        assert_eq!(
            deletion,
            RequestDeletion {
                tenant_id: t.clone(),
                control_space_id: cs.clone(),
                idempotency_key: k.clone(),
            }
        );
        let grant = GrantId::parse("g1").unwrap();
        let revocation =
            RequestRevocation::new(t.clone(), cs.clone(), grant.clone(), "why", k.clone());
        assert_eq!(
            revocation,
            RequestRevocation {
                tenant_id: t,
                control_space_id: cs,
                grant_id: grant,
                reason_code: "why".into(),
                idempotency_key: k,
            }
        );
    }
}
