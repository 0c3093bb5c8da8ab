//! Who operates: named operator tokens, each with a [`Role`], and the secrets they are made of
//! (docs/operations.md, "Operators and roles").
//!
//! - [`Secret`]: a secret setting (a token, a key) held in `secrecy`'s `SecretString`: its
//!   `Debug` prints `[REDACTED]`, its memory is wiped on drop, and two secrets compare in
//!   constant time;
//! - [`Operator`]: a name, a role and a token; [`Operators`]: the configured ones, looked up
//!   by token ([`Operators::authenticate`], constant time over every operator) or by name;
//! - [`Caller`]: who a request acts as (an authenticated operator, or nobody when no operator
//!   is configured and the admin API is open), and [`Caller::actor`], the one rule for the actor
//!   an action records.
//!
//! Roles: `read` may read everything (every `GET` of the admin API, every console page) and
//! change nothing; `operate` may do everything. The admin API refuses a mutation of a `read`
//! operator with 403 `FORBIDDEN_ROLE`, the console shows it no action and refuses a forged one,
//! and the CLI refuses it with exit code 1.

use std::fmt;
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::refusal::OperatorRefusal;

/// The operator name of the single `admin_token` setting (role `operate`).
pub const ADMIN_OPERATOR: &str = "admin";

/// The actor the console records when no operator is configured (the console is then open).
pub const OPEN_CONSOLE_ACTOR: &str = "console";

/// Longest operator name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// A secret value (a token, a key): `Debug` prints `Secret([REDACTED])`, equality is
/// constant-time (`subtle`), the memory is wiped on drop (`secrecy`).
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(SecretString::from(value.into()))
    }

    /// The secret itself, for the one place that must send or check it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Whether `presented` is this secret, compared in constant time for equal lengths.
    pub fn matches(&self, presented: &str) -> bool {
        tokens_equal(presented.as_bytes(), self.expose().as_bytes())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.expose())
    }
}

impl Eq for Secret {}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(value))
    }
}

/// A secret reads as a plain string (a configuration file's value).
impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

/// Compares two byte strings with `subtle`'s constant-time equality (no early exit on the
/// first differing byte; only the lengths may be learnt from the time taken).
pub fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// What an operator may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read everything, change nothing.
    Read,
    /// Everything: read, retry, abandon, mark deleted, clear fences, create and delete
    /// control spaces, revoke grants.
    Operate,
}

impl Role {
    /// `read` or `operate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
        }
    }

    /// Whether this role may change state.
    pub fn may_mutate(self) -> bool {
        self == Self::Operate
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "read" => Ok(Self::Read),
            "operate" => Ok(Self::Operate),
            other => Err(format!("{other:?} is not a role; use read or operate")),
        }
    }
}

/// Checks an operator name: 1..=[`MAX_NAME_BYTES`] bytes of ASCII letters, digits, `-`, `_`,
/// `.` or `@` (it is recorded as the actor of every action and shown in logs).
///
/// # Errors
/// What is wrong with the name.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "operator name {name:?} must be 1..={MAX_NAME_BYTES} bytes"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
    {
        return Err(format!(
            "operator name {name:?} may only hold ASCII letters, digits, '-', '_', '.' and '@'"
        ));
    }
    Ok(())
}

/// A configured operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The name recorded as the actor of its actions.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Its bearer token (also the console's sign-in secret).
    pub token: Secret,
}

/// The configured operators (none: the admin API and the console are open).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operators(Vec<Operator>);

impl Operators {
    /// The operators `list`; names must be distinct (the configuration checks it).
    pub fn new(list: Vec<Operator>) -> Self {
        Self(list)
    }

    /// Whether no operator is configured (the admin API is open then).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every operator, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &Operator> {
        self.0.iter()
    }

    /// The operator whose token is `presented`. Every configured token is compared (constant
    /// time each, no early exit), so the time taken does not say which operator matched.
    pub fn authenticate(&self, presented: &str) -> Option<&Operator> {
        let mut found = None;
        for operator in &self.0 {
            if operator.token.matches(presented) && found.is_none() {
                found = Some(operator);
            }
        }
        found
    }

    /// The operator named `name`.
    pub fn by_name(&self, name: &str) -> Option<&Operator> {
        self.0.iter().find(|o| o.name == name)
    }
}

/// Who a request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// An authenticated operator.
    Operator {
        /// Its name (the actor recorded).
        name: String,
        /// Its role.
        role: Role,
    },
    /// Nobody: no operator is configured, so the admin API is open (loopback only) and every
    /// caller may do everything.
    Open,
}

impl Caller {
    /// The caller of `operator`.
    pub fn of(operator: &Operator) -> Self {
        Self::Operator {
            name: operator.name.clone(),
            role: operator.role,
        }
    }

    /// What the caller may do.
    pub fn role(&self) -> Role {
        match self {
            Self::Operator { role, .. } => *role,
            Self::Open => Role::Operate,
        }
    }

    /// The operator's name, if authenticated.
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Operator { name, .. } => Some(name),
            Self::Open => None,
        }
    }

    /// Refuses a mutation of a `read` operator: 403 `FORBIDDEN_ROLE`.
    ///
    /// # Errors
    /// [`OperatorRefusal::forbidden_role`] for a `read` operator.
    pub fn may_mutate(&self) -> Result<(), OperatorRefusal> {
        match self {
            Self::Operator { name, role } if !role.may_mutate() => {
                Err(OperatorRefusal::forbidden_role(name, *role))
            }
            _ => Ok(()),
        }
    }

    /// The actor an action of this caller records, given the `actor` the request states (the
    /// admin API's body field, the CLI's `--actor`):
    ///
    /// - an authenticated operator records its own name. A stated actor that is blank is 400
    ///   `INVALID_ARGUMENT`; one that differs from the name is refused with 403
    ///   `ACTOR_MISMATCH` (nothing is written: an action is never recorded under a name its
    ///   token does not hold, and a client that believes it records another name learns that
    ///   it does not);
    /// - an open caller (no operator configured) records the stated actor, which is then
    ///   required (400 `INVALID_ARGUMENT` without one); `default` is used instead when given
    ///   (the console's `console`, the CLI's `cli:$USER`).
    ///
    /// # Errors
    /// The refusals above.
    pub fn actor(
        &self,
        stated: Option<&str>,
        default: Option<&str>,
    ) -> Result<String, OperatorRefusal> {
        let stated = stated.map(str::trim);
        match (self, stated) {
            (_, Some("")) => Err(OperatorRefusal::invalid(
                "actor",
                "is blank; omit it (the operator's name is recorded) or give a name",
            )),
            (Self::Operator { name, .. }, None) => Ok(name.clone()),
            (Self::Operator { name, .. }, Some(stated)) if stated == name => Ok(name.clone()),
            (Self::Operator { name, .. }, Some(stated)) => {
                Err(OperatorRefusal::actor_mismatch(name, stated))
            }
            (Self::Open, Some(stated)) => Ok(stated.to_owned()),
            (Self::Open, None) => default.map(str::to_owned).ok_or_else(|| {
                OperatorRefusal::invalid(
                    "actor",
                    "is required when no operator token is configured (say who acts)",
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(name: &str, role: Role, token: &str) -> Operator {
        Operator {
            name: name.to_owned(),
            role,
            token: Secret::new(token),
        }
    }

    #[test]
    fn a_secret_never_prints() {
        let secret = Secret::new("hunter2-hunter2-hunter2");
        let shown = format!("{secret:?} {:?}", Some(&secret));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
        assert!(secret.matches("hunter2-hunter2-hunter2"));
        assert!(!secret.matches("hunter2-hunter2-hunter3"));
        assert!(!secret.matches("hunter2"));
        assert_eq!(secret, Secret::from("hunter2-hunter2-hunter2"));
    }

    #[test]
    fn token_comparison_needs_equal_bytes() {
        assert!(tokens_equal(b"abc", b"abc"));
        assert!(!tokens_equal(b"abc", b"abd"));
        assert!(!tokens_equal(b"abc", b"abcd"));
        assert!(!tokens_equal(b"", b"a"));
    }

    #[test]
    fn operators_are_found_by_token_and_name() {
        let operators = Operators::new(vec![
            operator("alice", Role::Operate, "alice-token-0123456789"),
            operator("bob", Role::Read, "bob-token-0123456789"),
        ]);
        assert_eq!(
            operators
                .authenticate("bob-token-0123456789")
                .map(|o| o.name.as_str()),
            Some("bob")
        );
        assert!(operators.authenticate("bob-token-012345678").is_none());
        assert!(operators.authenticate("").is_none());
        assert_eq!(
            operators.by_name("alice").map(|o| o.role),
            Some(Role::Operate)
        );
        assert!(operators.by_name("carol").is_none());
    }

    #[test]
    fn roles_parse_and_only_operate_mutates() {
        assert_eq!("read".parse(), Ok(Role::Read));
        assert_eq!(" operate ".parse(), Ok(Role::Operate));
        assert!("admin".parse::<Role>().is_err());
        let reader = Caller::Operator {
            name: "bob".into(),
            role: Role::Read,
        };
        let refused = reader.may_mutate().unwrap_err();
        assert_eq!(refused.status.as_u16(), 403);
        assert_eq!(refused.code, "FORBIDDEN_ROLE");
        assert!(Caller::Open.may_mutate().is_ok());
    }

    /// The actor rule, as a table: (caller, stated actor, default) → recorded actor or the
    /// refusal's code.
    #[test]
    fn the_actor_is_the_operators_name() {
        let alice = Caller::Operator {
            name: "alice".into(),
            role: Role::Operate,
        };
        /// (caller, stated actor, default, recorded actor or the refusal's code)
        type Case<'a> = (
            &'a Caller,
            Option<&'a str>,
            Option<&'a str>,
            Result<&'a str, &'a str>,
        );
        let cases: [Case<'_>; 8] = [
            (&alice, None, None, Ok("alice")),
            (&alice, None, Some("console"), Ok("alice")),
            (&alice, Some("alice"), None, Ok("alice")),
            (&alice, Some(" alice "), None, Ok("alice")),
            (&alice, Some("oncall"), None, Err("ACTOR_MISMATCH")),
            (&alice, Some(" "), None, Err("INVALID_ARGUMENT")),
            (&Caller::Open, Some("oncall"), Some("console"), Ok("oncall")),
            (&Caller::Open, None, None, Err("INVALID_ARGUMENT")),
        ];
        for (caller, stated, default, expected) in cases {
            let got = caller
                .actor(stated, default)
                .map_err(|refusal| refusal.code);
            assert_eq!(
                got.as_deref().map_err(|c| *c),
                expected,
                "{caller:?} {stated:?} {default:?}"
            );
        }
        assert_eq!(
            Caller::Open.actor(None, Some("console")).unwrap(),
            "console"
        );
    }
}
