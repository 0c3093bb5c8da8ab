//! Console sessions as signed cookies, so that any replica behind a load balancer accepts a
//! session another replica started (docs/operations.md, "Operators and roles").
//!
//! The cookie value is `v1.<payload>.<tag>`: `payload` is the hex of a small JSON object (the
//! operator's name, its role, the expiry as Unix seconds, the session's CSRF token and a
//! fingerprint of the operator's token), `tag` the hex of its HMAC-SHA256 under the session
//! key (`ui_session_key`; without one, a random key of this process). A cookie is accepted
//! only when its tag verifies (constant time, `hmac`'s `verify_slice`), it has not expired on
//! the clock port's wall time, and its operator is still configured with the same role and
//! the same token (a rotated token ends the sessions it started). Nothing but sign-outs is
//! stored on the server: signing out clears the cookie in the browser and remembers the
//! session as ended in this process ([`Sessions::revoke`], until it would have expired); a
//! copy of the cookie presented to another replica stays valid there until it expires, so
//! the lifetime is bounded ([`SESSION_LIFETIME`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2_hmac::Sha256;
use tenantry_ports::clock::Clock;

use crate::identity::{OPEN_CONSOLE_ACTOR, Operators, Role, Secret};

type HmacSha256 = Hmac<Sha256>;

/// How long a session lasts after sign-in: 12 hours.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Shortest accepted `ui_session_key`, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

/// The cookie format's version prefix.
const VERSION: &str = "v1";

/// A signed-in console session, as handlers see it (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The operator signed in (`console` when no operator is configured).
    pub operator: String,
    /// Its role.
    pub role: Role,
    /// The CSRF token every state-changing request of this session must carry.
    pub csrf: Arc<str>,
    /// Whether this session may not act: the role is `read`, or the console is read-only
    /// (`ui_read_only`). Pages show no action then, and every action is refused with 403.
    pub read_only: bool,
    /// When the session ends, Unix seconds (wall time of the clock port).
    pub expires_at: i64,
}

impl Session {
    /// The actor the session's actions record: the operator's name.
    pub fn actor(&self) -> &str {
        &self.operator
    }
}

/// What the cookie carries (JSON, then hex).
#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    /// Operator name.
    o: String,
    /// Role.
    r: String,
    /// Expiry, Unix seconds.
    e: i64,
    /// CSRF token.
    c: String,
    /// Fingerprint of the operator's token (empty for the open console).
    t: String,
}

/// Most signed-out sessions remembered at once (the oldest to expire goes first beyond it).
pub const MAX_REVOKED: usize = 100_000;

/// Signs and checks session cookies with one key.
pub struct Sessions {
    key: Secret,
    clock: Arc<dyn Clock>,
    operators: Arc<Operators>,
    /// Sessions signed out in this process: CSRF token → expiry (Unix seconds).
    revoked: Mutex<HashMap<Arc<str>, i64>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// 32 random bytes as hex: a CSRF token or a per-process key.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Sessions {
    /// Sessions signed with `key` (`None`: a random key of this process, so a session works on
    /// this replica only and ends with the process), for `operators`, timed on `clock`.
    pub fn new(key: Option<Secret>, operators: Arc<Operators>, clock: Arc<dyn Clock>) -> Self {
        let key = key.unwrap_or_else(|| Secret::new(random_token()));
        Self {
            key,
            clock,
            operators,
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// Ends `session` in this process (sign-out): its cookie is refused from now on here.
    pub fn revoke(&self, session: &Session) {
        let now = self.clock.now().timestamp();
        let mut revoked = self.revoked.lock().unwrap_or_else(PoisonError::into_inner);
        revoked.retain(|_, expires| *expires > now);
        if revoked.len() >= MAX_REVOKED
            && let Some(first) = revoked
                .iter()
                .min_by_key(|(_, expires)| **expires)
                .map(|(csrf, _)| csrf.clone())
        {
            revoked.remove(&first);
        }
        revoked.insert(session.csrf.clone(), session.expires_at);
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes a key of any length.
        <HmacSha256 as KeyInit>::new_from_slice(self.key.expose().as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"))
    }

    /// A fingerprint of the token `token` under this key (16 hex digits), so a cookie names
    /// the token it was started with without carrying anything that helps guess it.
    fn fingerprint(&self, token: &Secret) -> String {
        let mut mac = self.mac();
        mac.update(b"tenantry console token\0");
        mac.update(token.expose().as_bytes());
        hex::encode(&mac.finalize().into_bytes()[..8])
    }

    /// The token fingerprint of the session of `operator` with `role` now: the configured
    /// operator's (None when it is not configured, or has another role).
    fn expected_fingerprint(&self, operator: &str, role: Role) -> Option<String> {
        if self.operators.is_empty() {
            return (operator == OPEN_CONSOLE_ACTOR).then(String::new);
        }
        let configured = self.operators.by_name(operator)?;
        (configured.role == role).then(|| self.fingerprint(&configured.token))
    }

    /// Starts a session of `operator` with `role`: the cookie value.
    pub fn issue(&self, operator: &str, role: Role) -> String {
        let expires_at = self.clock.now().timestamp()
            + i64::try_from(SESSION_LIFETIME.as_secs()).unwrap_or(i64::MAX);
        let payload = Payload {
            o: operator.to_owned(),
            r: role.as_str().to_owned(),
            e: expires_at,
            c: random_token(),
            t: self
                .expected_fingerprint(operator, role)
                .unwrap_or_default(),
        };
        let json = serde_json::to_vec(&payload).unwrap_or_default();
        let body = format!("{VERSION}.{}", hex::encode(json));
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        format!("{body}.{}", hex::encode(mac.finalize().into_bytes()))
    }

    /// The session of a cookie value, if its signature verifies under this key, it has not
    /// expired, and its operator is still configured with the same role and token.
    /// `read_only` is the role's (a `read` operator); the console's `ui_read_only` is added
    /// by the caller.
    pub fn verify(&self, cookie: &str) -> Option<Session> {
        let (body, tag) = cookie.rsplit_once('.')?;
        let (version, payload_hex) = body.split_once('.')?;
        if version != VERSION {
            return None;
        }
        let tag = hex::decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        mac.verify_slice(&tag).ok()?;
        let payload: Payload = serde_json::from_slice(&hex::decode(payload_hex).ok()?).ok()?;
        if payload.e <= self.clock.now().timestamp() {
            return None;
        }
        let role: Role = payload.r.parse().ok()?;
        let expected = self.expected_fingerprint(&payload.o, role)?;
        if !crate::identity::tokens_equal(expected.as_bytes(), payload.t.as_bytes()) {
            return None;
        }
        if self
            .revoked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(payload.c.as_str())
        {
            return None;
        }
        Some(Session {
            operator: payload.o,
            role,
            csrf: Arc::from(payload.c),
            read_only: !role.may_mutate(),
            expires_at: payload.e,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tenantry_ports::clock::ManualClock;

    use super::*;
    use crate::identity::Operator;

    fn operators(list: &[(&str, Role, &str)]) -> Arc<Operators> {
        Arc::new(Operators::new(
            list.iter()
                .map(|(name, role, token)| Operator {
                    name: (*name).to_owned(),
                    role: *role,
                    token: Secret::new(*token),
                })
                .collect(),
        ))
    }

    const KEY: &str = "session-key-0123456789abcdef0123456789";

    fn alice() -> Arc<Operators> {
        operators(&[("alice", Role::Operate, "alice-token-0123456789")])
    }

    /// Two replicas with the same key and operators: a cookie one issued is accepted by the
    /// other; a replica with another key refuses it.
    #[test]
    fn a_cookie_from_replica_a_is_accepted_by_replica_b_with_the_same_key() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let a = Sessions::new(Some(Secret::new(KEY)), alice(), clock.clone());
        let b = Sessions::new(Some(Secret::new(KEY)), alice(), clock.clone());
        let other = Sessions::new(Some(Secret::new(format!("{KEY}x"))), alice(), clock);
        let cookie = a.issue("alice", Role::Operate);
        let session = b.verify(&cookie).unwrap();
        assert_eq!(session.operator, "alice");
        assert_eq!(session.role, Role::Operate);
        assert!(!session.read_only);
        assert_eq!(a.verify(&cookie), Some(session));
        assert_eq!(other.verify(&cookie), None, "signed by another key");
    }

    #[test]
    fn an_expired_or_tampered_cookie_is_refused() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let sessions = Sessions::new(Some(Secret::new(KEY)), alice(), clock.clone());
        let cookie = sessions.issue("alice", Role::Operate);
        // Another payload under the same tag (a forged role or name) is refused.
        let (body, tag) = cookie.rsplit_once('.').unwrap();
        let forged = sessions.issue("alice", Role::Operate);
        let (forged_body, _) = forged.rsplit_once('.').unwrap();
        assert_ne!(body, forged_body);
        assert_eq!(sessions.verify(&format!("{forged_body}.{tag}")), None);
        assert_eq!(sessions.verify("v1.00.00"), None);
        assert_eq!(sessions.verify("garbage"), None);
        clock.advance(SESSION_LIFETIME - Duration::from_secs(1));
        assert!(sessions.verify(&cookie).is_some());
        clock.advance(Duration::from_secs(1));
        assert_eq!(sessions.verify(&cookie), None, "expired");
    }

    /// A session ends when its operator is removed, changes role or gets a new token.
    #[test]
    fn a_cookie_for_an_operator_no_longer_configured_is_refused() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(chrono::Utc::now()));
        let cookie = Sessions::new(Some(Secret::new(KEY)), alice(), clock.clone())
            .issue("alice", Role::Operate);
        let check = |operators| {
            Sessions::new(Some(Secret::new(KEY)), operators, clock.clone()).verify(&cookie)
        };
        assert!(check(alice()).is_some());
        assert_eq!(
            check(operators(&[("bob", Role::Operate, "bob-token-0123456789")])),
            None
        );
        assert_eq!(
            check(operators(&[(
                "alice",
                Role::Read,
                "alice-token-0123456789"
            )])),
            None
        );
        assert_eq!(
            check(operators(&[(
                "alice",
                Role::Operate,
                "alice-token-rotated-01"
            )])),
            None
        );
    }

    #[test]
    fn a_signed_out_session_is_refused_here() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let sessions = Sessions::new(Some(Secret::new(KEY)), alice(), clock);
        let cookie = sessions.issue("alice", Role::Operate);
        let session = sessions.verify(&cookie).unwrap();
        sessions.revoke(&session);
        assert_eq!(sessions.verify(&cookie), None);
        assert!(
            sessions
                .verify(&sessions.issue("alice", Role::Operate))
                .is_some()
        );
    }

    #[test]
    fn a_read_session_is_read_only_and_keys_never_print() {
        let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
        let sessions = Sessions::new(
            Some(Secret::new(KEY)),
            operators(&[("bob", Role::Read, "bob-token-0123456789")]),
            clock,
        );
        let session = sessions.verify(&sessions.issue("bob", Role::Read)).unwrap();
        assert!(session.read_only);
        assert!(!format!("{sessions:?}").contains(KEY));
    }
}
