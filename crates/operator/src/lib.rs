//! The operator façade: what the three operator front doors (the admin HTTP API, the console
//! and the `tenantry` CLI) share, written once and rendered by each in its own form. Generic
//! over the ports; no storage or HTTP types.
//!
//! - [`filter`]: the command filter. One typed input ([`CommandFilterInput`]), one parser,
//!   one refusal ([`FilterError`] naming the [`FilterField`]), which the API reports as 400
//!   `INVALID_ARGUMENT` with its parameter name, the console on its error page, and the CLI
//!   with the option's name (exit code 2).

pub mod filter;

pub use filter::{CommandFilterInput, DEFAULT_PAGE, FilterError, FilterField, MAX_PAGE};
