//! Pure reconciliation-fence rules: scope identity, fence keys, dispatch-outcome classification, connector-state rules.
