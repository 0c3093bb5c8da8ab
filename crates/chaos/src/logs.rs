//! Reading the replicas' JSON logs (`TENANTRY_LOG_FORMAT=json`): the lifecycle dispatcher's
//! `LEASE_LOST` warnings. A dropped attempt ("lease was taken over …", fields `our_epoch`,
//! `new_owner`; span `lifecycle_dispatch` with `command_id`) is a refused late settle; a refused
//! renewal carries no epoch and is counted apart. An attempt that ended on a storage error
//! ("dispatch ended without a settlement", span field `attempt`) is noted too: it left its
//! command to expire, so a later takeover of it needs no refusal.

use std::collections::BTreeSet;

use serde_json::Value;

/// What one replica log says about lost leases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseLog {
    /// Attempts dropped because their lease was taken over: (command id, the attempt's epoch).
    pub dropped: BTreeSet<(String, i64)>,
    /// Attempts that ended without a settlement for another reason (a storage error): (command
    /// id, attempt count).
    pub unsettled: BTreeSet<(String, i64)>,
    /// Renewals refused because the command was taken over.
    pub renewals_refused: u64,
    /// Lines at level ERROR.
    pub errors: u64,
}

impl LeaseLog {
    /// Adds what `text` (a whole log, one JSON object per line) says.
    pub fn read(&mut self, text: &str) {
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if entry["level"] == "ERROR" {
                self.errors += 1;
            }
            if entry["fields"]["code"] != "LEASE_LOST" {
                let unsettled = entry["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("dispatch ended without a settlement"));
                if unsettled
                    && let (Some(id), Some(attempt)) = (command_id(&entry), attempt(&entry))
                {
                    self.unsettled.insert((id, attempt));
                }
                continue;
            }
            match (entry["fields"]["our_epoch"].as_i64(), command_id(&entry)) {
                (Some(epoch), Some(id)) => {
                    self.dropped.insert((id, epoch));
                }
                _ => self.renewals_refused += 1,
            }
        }
    }
}

/// The `command_id` of the line's `lifecycle_dispatch` span (current span, else the list).
fn command_id(entry: &Value) -> Option<String> {
    span_field(entry, "command_id", |v| v.as_str().map(str::to_owned))
}

/// The `attempt` of the line's `lifecycle_dispatch` span.
fn attempt(entry: &Value) -> Option<i64> {
    span_field(entry, "attempt", |v| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    })
}

fn span_field<T>(entry: &Value, name: &str, read: impl Fn(&Value) -> Option<T>) -> Option<T> {
    if let Some(value) = read(&entry["span"][name]) {
        return Some(value);
    }
    entry["spans"]
        .as_array()?
        .iter()
        .find_map(|span| read(&span[name]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_attempts_and_refused_renewals_are_told_apart() {
        let text = concat!(
            r#"{"timestamp":"t","level":"WARN","fields":{"message":"lease was taken over by another worker","code":"LEASE_LOST","new_owner":"w-2","new_epoch":4,"status":"succeeded","our_epoch":3},"target":"x","span":{"command_id":"c1","name":"lifecycle_dispatch"},"spans":[{"command_id":"c1","name":"lifecycle_dispatch"}]}"#,
            "\n",
            r#"{"timestamp":"t","level":"WARN","fields":{"message":"lease renewal refused","code":"LEASE_LOST"},"target":"x","span":{"command_id":"c1","name":"lifecycle_dispatch"}}"#,
            "\n",
            r#"{"timestamp":"t","level":"ERROR","fields":{"message":"boom"},"target":"x"}"#,
            "\n",
            r#"{"timestamp":"t","level":"WARN","fields":{"message":"dispatch ended without a settlement; the command is retried once its lease expires","code":"STORE_UNAVAILABLE"},"span":{"command_id":"c3","attempt":2,"name":"lifecycle_dispatch"}}"#,
            "\n",
            "not json\n",
            r#"{"timestamp":"t","level":"WARN","fields":{"message":"m","code":"LEASE_LOST","our_epoch":7},"spans":[{"name":"outer"},{"command_id":"c2","name":"lifecycle_dispatch"}]}"#,
        );
        let mut log = LeaseLog::default();
        log.read(text);
        assert_eq!(
            log.dropped,
            BTreeSet::from([("c1".to_owned(), 3), ("c2".to_owned(), 7)])
        );
        assert_eq!(log.renewals_refused, 1);
        assert_eq!(log.unsettled, BTreeSet::from([("c3".to_owned(), 2)]));
        assert_eq!(log.errors, 1);
    }
}
