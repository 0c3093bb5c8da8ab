//! Planted mutations of shipped rules, for the checkers of `crates/verification` only
//! (docs/verification.md, "Properties and planted mutations"). Off unless the crate is built
//! with the feature `planted-mutations`, which no normal build turns on: without it
//! [`planted!`](crate::planted!) is the constant `false` and nothing of this module exists.
//!
//! With the feature, a rule that reads `planted!("name")` takes its mutated branch while a
//! test has [`activate`]d that name (one at a time, process-wide): a model or simulation is then
//! run over the mutated shipped rule and must report the property it breaks.

use std::sync::Mutex;

static ACTIVE: Mutex<Option<&'static str>> = Mutex::new(None);

/// Turns the mutation `name` on (`None`: every mutation off). Process-wide: tests that use it
/// run one after the other in one test function.
pub fn activate(name: Option<&'static str>) {
    *ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = name;
}

/// Whether the mutation `name` is on.
pub fn active(name: &str) -> bool {
    ACTIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some_and(|on| on == name)
}
