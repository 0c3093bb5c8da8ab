//! A map of shared entries that sweeps its idle ones instead of removing each when it is let
//! go ([`SweptMap`]): the scope locks of the fence runtime (`scoped_writes::locks`) and the
//! per-tenant call bounds of the worker pool (`lifecycle::dispatcher::slots`).
//!
//! An entry is idle when the map holds the only reference to it (`Arc::strong_count == 1`):
//! nobody holds it or waits for it. Idle entries stay until the map reaches `sweep_at`
//! entries while inserting a new key; then every idle entry is removed and `sweep_at` becomes
//! twice the entries left (at least [`MIN_SWEEP_AT`]). The map therefore holds at most about
//! twice the entries in use at once, or [`MIN_SWEEP_AT`], and a key used again soon finds its
//! entry without an allocation; letting go of an entry never touches the map.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::sync::Arc;

/// Map size below which no sweep runs.
pub(crate) const MIN_SWEEP_AT: usize = 64;

/// Shared entries by key, idle ones swept when the map doubles (see the module documentation).
/// Reads go through `Deref` to the map itself.
#[derive(Debug)]
pub(crate) struct SweptMap<K, V, H = std::collections::hash_map::RandomState> {
    entries: HashMap<K, Arc<V>, H>,
    sweep_at: usize,
}

impl<K, V, H: Default> Default for SweptMap<K, V, H> {
    fn default() -> Self {
        Self {
            entries: HashMap::default(),
            sweep_at: MIN_SWEEP_AT,
        }
    }
}

impl<K: Eq + Hash + Clone, V, H: BuildHasher> SweptMap<K, V, H> {
    /// The entry of `key`, made by `make` (after a sweep when the map is due one) when absent.
    pub(crate) fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> Arc<V> {
        if let Some(entry) = self.entries.get(key) {
            return entry.clone();
        }
        if self.entries.len() >= self.sweep_at {
            self.entries.retain(|_, entry| !is_idle(entry));
            self.sweep_at = (self.entries.len() * 2).max(MIN_SWEEP_AT);
        }
        let entry = Arc::new(make());
        self.entries.insert(key.clone(), entry.clone());
        entry
    }

    /// Forgets every entry `keep` refuses (holders keep theirs).
    #[cfg_attr(
        not(feature = "fences"),
        allow(dead_code, reason = "only the fence locks forget entries")
    )]
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &Arc<V>) -> bool) {
        self.entries.retain(|key, entry| keep(key, entry));
    }
}

impl<K, V, H> Deref for SweptMap<K, V, H> {
    type Target = HashMap<K, Arc<V>, H>;

    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

/// Whether only the map references `entry`.
pub(crate) fn is_idle<V>(entry: &Arc<V>) -> bool {
    Arc::strong_count(entry) == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_entries_are_swept_when_the_map_doubles_and_held_ones_survive() {
        let mut map: SweptMap<u32, u32> = SweptMap::default();
        let held: Vec<Arc<u32>> = (0..10).map(|k| map.get_or_insert_with(&k, || k)).collect();
        for k in 10..1_000 {
            drop(map.get_or_insert_with(&k, || k));
            assert!(map.len() <= MIN_SWEEP_AT, "{} entries", map.len());
        }
        for (k, entry) in (0..10).zip(&held) {
            let again = map.get_or_insert_with(&k, || 99);
            assert!(Arc::ptr_eq(entry, &again), "held entry {k} kept");
        }
        // Many held at once: the bound follows them (twice the entries in use).
        let many: Vec<Arc<u32>> = (2_000..2_200)
            .map(|k| map.get_or_insert_with(&k, || k))
            .collect();
        assert!(map.len() >= 200 && map.len() <= 2 * 210 + MIN_SWEEP_AT);
        drop(many);
        assert!(!is_idle(&held[0]));
    }
}
