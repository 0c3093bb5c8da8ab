//! Pure directory projection rules: models, batch validation, revision checks, fingerprints, capacity limits, readiness.
