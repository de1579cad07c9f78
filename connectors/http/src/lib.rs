//! `type = "http"`: any REST API as a recon source or target, its whole
//! behaviour declared in the job config.
//!
//! - **Reads**: a list request (method, path, query and JSON body
//!   templates that use the window's start and end as Unix seconds,
//!   milliseconds, RFC 3339 or a date: [`template`]), the records and each
//!   field by JSONPath (RFC 9535, `serde_json_path`: [`path`]), values
//!   typed exactly from the JSON text ([`convert`]), and paging of every
//!   common kind: a cursor from the body (`has_more` + the last ID, or a
//!   next cursor), a next-page URL in the body, the RFC 8288 `Link` header,
//!   offset/limit (with a total, a more-items flag or a short page) and
//!   page numbers ([`settings::PagingSettings`]). A window the API cannot
//!   filter (`list.window = "client"`) is filtered here, and the log and
//!   `recon check` say so.
//! - **Lookups** for edge confirmation: one by ID (`{{ id }}`) or batched
//!   (`{{ ids }}`, `{{ items }}`); without one, edge confirmation is off for
//!   that side and the run says so.
//! - **Writes**: create (one by one or through a batch endpoint) with
//!   recon's deterministic idempotency key, update by key or by the ID a
//!   lookup found, declared outcome rules, and the uniqueness declaration
//!   `check_idempotent` insists on ([`target`]).
//! - **HTTP**: every call goes through the shared policy
//!   (`recon_core::http`): the declared rate, rate-limit headers,
//!   `Retry-After`, retried statuses, the request-ID header; auth by
//!   bearer token, basic, API key in a header or the query, OAuth 2.0
//!   client credentials, or an OAuth 2.0 refresh token whose rotations are
//!   kept sealed in the state store (`recon_core::http::rotating`, shared
//!   with QuickBooks) ([`client`]), every value a scrubbed secret.
//!
//! The emulator (feature `emulator`) serves the styles the tests and
//! `examples/http/` use.

pub mod client;
pub mod convert;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod path;
pub mod settings;
mod source;
mod target;
pub mod template;

pub use settings::HttpSettings;
pub use source::HttpSource;
pub use target::{idempotency_key, HttpTarget};
