//! An emulator of the QuickBooks Online Accounting API v3 and Intuit's
//! OAuth 2.0 token endpoint, served over real HTTP on `127.0.0.1`, for
//! tests. Written from Intuit's public pages; each behaviour names its
//! page. Where the pages say nothing, the behaviour is a modelling choice,
//! said so here, and where it matters a knob of [`EmulatorConfig`].
//!
//! * **Query** (`GET /v3/company/{realm}/query?query=…`, also `POST` with
//!   the statement as the body): the documented subset of the query
//!   language ("Query operations and syntax",
//!   https://developer.intuit.com/app/developer/qbo/docs/learn/explore-the-quickbooks-online-api/data-queries),
//!   see [`query`]; `STARTPOSITION` (1-based) and `MAXRESULTS`, at most 1000
//!   (more is clamped, or refused with [`EmulatorConfig::maxresults_over_limit_fails`];
//!   the 1000 cap is Intuit's error 540 "absolute upper limit (1000)", the
//!   default page of 100 is not on an Intuit page: [`EmulatorConfig::default_max_results`]).
//!   Envelope `{"QueryResponse": {"Invoice": […], "startPosition", "maxResults"}, "time"}`,
//!   `{}` when nothing matches, `{"totalCount"}` for `count(*)`.
//! * **Errors**: `{"Fault": {"Error": [{"Message", "Detail", "code", "element"}], "type"}, "time"}`
//!   with `code` a string ("Review QuickBooks Online Accounting API error codes",
//!   https://developer.intuit.com/app/developer/qbo/docs/develop/troubleshooting/error-codes;
//!   "Handling common errors",
//!   https://developer.intuit.com/app/developer/qbo/docs/develop/troubleshooting/handling-common-errors).
//!   Codes used: `4000` query errors (modelling: the form commonly
//!   reported), `2500` invalid reference, `610` object not found, `6140`
//!   duplicate document number (Intuit blog "Top QuickBooks Online API
//!   Errors and How to Handle Them",
//!   https://developer.intuit.com/hub/blog/2017/06/08/top-quickbooks-online-api-errors-and-how-to-handle-them),
//!   `5010` stale object, `1040` batch too large, `600` duplicate request
//!   ID (Intuit's error-code table as copied by third parties), `6000`
//!   other business validation.
//! * **Create and sparse update** (`POST /v3/company/{realm}/invoice|salesreceipt`):
//!   the create shape of "Custom fields use cases"
//!   (https://developer.intuit.com/app/developer/qbo/docs/workflows/create-custom-fields/use-cases):
//!   string `Id` and `SyncToken`, `MetaData.CreateTime` with the company's
//!   offset, `TotalAmt` the exact sum of the sales lines, a
//!   `SubTotalLineDetail` line in answers ([`EmulatorConfig::subtotal_line`]),
//!   `CurrencyRef` and `ExchangeRate`, `CustomField` with `Name` and `Type`.
//!   No uniqueness on `DocNumber` unless [`EmulatorConfig::duplicate_docnumber_error`]
//!   (then `6140`). `"sparse": true` with `Id` and `SyncToken` updates only
//!   the fields sent (arrays replaced whole); a `SyncToken` other than the
//!   current one is `5010 Stale Object Error` (the text reported in
//!   intuit/QuickBooks-V3-DotNET-SDK#366 and routablehq/python-quickbooks#127).
//! * **Batch** (`POST /v3/company/{realm}/batch`, Intuit blog "Batch
//!   without a Scratch", https://blogs.intuit.com/2023/07/19/building-smarter-with-intuit-batch-without-a-scratch/,
//!   and the Batch page, https://developer.intuit.com/app/developer/qbo/docs/learn/explore-the-quickbooks-online-api/batch):
//!   `BatchItemRequest` items with `bId` and `operation` or `Query`, answered
//!   per item by `bId` in one `200`, a failed item carrying its `Fault`;
//!   items do not see each other's writes (2017 blog,
//!   https://blogs.intuit.com/2017/07/27/batch-operations-important). The
//!   pages disagree on the items per request (30 in the 2023 blog, 10 on
//!   the Batch page): [`EmulatorConfig::batch_max_items`], default 30;
//!   more is `1040`. An empty batch is `MalformedRequest`.
//! * **`requestid`** (Intuit blog "Request ID update",
//!   https://blogs.intuit.com/blog/2015/04/06/15346/): per company; at most
//!   50 characters (36 for batch, whose `bId`s may then have 10 at most);
//!   a request repeating an earlier one's ID gets that request's answer
//!   again and does nothing. Modelling choices: the same ID with another
//!   body is `600` "Duplicate Request ID"; how long IDs are remembered is
//!   undocumented ([`EmulatorConfig::requestid_window`], default forever).
//! * **Company** (`GET …/companyinfo/{realm}`, `GET …/preferences`):
//!   `CompanyName`, `Country`; `CurrencyPrefs.HomeCurrency` and
//!   `MultiCurrencyEnabled`; legacy custom field names in
//!   `SalesFormsPrefs.CustomField` ("Manage custom fields",
//!   https://developer.intuit.com/app/developer/qbo/docs/develop/tutorials/create-custom-fields:
//!   three string fields, named in the UI only; the `SalesFormsPrefs.CustomField`
//!   path is the common implementation, not read on an Intuit page). The
//!   names of the numbering preferences are undocumented: the emulator
//!   reports `SalesFormsPrefs.CustomTxnNumbers` and an `OtherPrefs.NameValue`
//!   entry `WarnDuplicateDocNum` (modelling choices, following
//!   [`EmulatorConfig::duplicate_docnumber_error`]). A currency other than the
//!   home currency is refused without multicurrency, and a customer takes
//!   its own currency only (Intuit blog on multicurrency,
//!   https://developer.intuit.com/hub/blog/2015/06/18/multicurrency-for-us-companies-coming-in-quickbooks-online-v87).
//! * **OAuth 2.0** (`POST /oauth2/v1/tokens/bearer`, `POST /v2/oauth2/tokens/revoke`;
//!   OAuth FAQ, https://developer.intuit.com/app/developer/qbo/docs/develop/authentication-and-authorization/faq):
//!   `grant_type=refresh_token` with HTTP Basic client credentials; access
//!   tokens valid 3600 s (on tokio's clock, so paused-clock tests move
//!   it); "the latest refresh_token returned to you from the previous
//!   request": each refresh returns a new refresh token and the old one
//!   stops working at once (strict; how long Intuit keeps the old one
//!   working is undocumented: [`EmulatorConfig::refresh_grace`],
//!   [`EmulatorConfig::rotate_refresh_tokens`]).
//!   An unknown, rotated or revoked refresh token is `400 {"error": "invalid_grant"}`;
//!   a bad client `401 {"error": "invalid_client"}`. An API call without a
//!   valid access token is the gateway's `401 {"code": "AuthenticationFailed", …}`.
//! * **Throttling** (Intuit blog "QuickBooks Online API throttling changes",
//!   https://blogs.intuit.com/blog/2016/08/08/idg-concurrent-api-use-changes-coming-soon/):
//!   500 requests per minute per company (batches included), 10 at once,
//!   and 40 batch requests per minute (Batch page); more is `429` with a
//!   `ThrottleExceeded` fault (that body is third-party reported).
//! * **`intuit_tid`** on every response ("Fix GraphQL errors",
//!   https://developer.intuit.com/app/developer/qbo/docs/develop/troubleshooting/graphql-errors).
//! * **Transport faults** from the emulator kit: 429/500/503 before the
//!   work, dropped connections, and the work done with its answer lost
//!   (`ServerErrorAfterWork`, `DropAfterWork`).

pub mod query;
mod server;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use recon_emulator_kit::Server;
pub use recon_emulator_kit::{Fault, Stats, TransportFault};
use serde_json::Value;

use server::Shared;

/// How an [`Emulator`] behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The company (realm) ID. Default `"9341453000000001"`.
    pub realm_id: String,
    /// `CompanyInfo.CompanyName`.
    pub company_name: String,
    /// `CurrencyPrefs.HomeCurrency`. Default `"USD"`.
    pub home_currency: String,
    /// `CurrencyPrefs.MultiCurrencyEnabled`. Default `false`.
    pub multicurrency: bool,
    /// Names of the (up to three) legacy custom fields, `DefinitionId` 1, 2, 3.
    pub custom_fields: Vec<String>,
    /// Items a sales line may name (`ItemRef.value`); default `["1"]`.
    pub items: Vec<String>,
    /// Most `BatchItemRequest`s per batch (default 30; Intuit's pages say 30 or 10).
    pub batch_max_items: usize,
    /// Requests per minute per company (default 500).
    pub requests_per_minute: u32,
    /// Batch requests per minute per company (default 40).
    pub batch_per_minute: u32,
    /// Requests handled at once per company (default 10).
    pub max_concurrent: u32,
    /// Whether each item of a batch also counts against
    /// `requests_per_minute` (default `true`; undocumented, conservative).
    pub meter_batch_items: bool,
    /// Access token lifetime (default 3600 s).
    pub access_token_ttl: Duration,
    /// Each refresh returns a new refresh token and retires the old one
    /// (default `true`); `false`: the same refresh token stays valid.
    pub rotate_refresh_tokens: bool,
    /// How long a rotated-out refresh token still works (default `None`:
    /// not at all; Intuit documents no grace period).
    pub refresh_grace: Option<Duration>,
    /// A create with a `DocNumber` already used is `6140` (default `false`:
    /// QuickBooks only warns, in its UI).
    pub duplicate_docnumber_error: bool,
    /// Add a `SubTotalLineDetail` line to answers (default `true`).
    pub subtotal_line: bool,
    /// Rows per page when `MAXRESULTS` is missing (default 100; undocumented).
    pub default_max_results: u64,
    /// `MAXRESULTS` over 1000 is a 4000 error instead of clamped (default `false`).
    pub maxresults_over_limit_fails: bool,
    /// How long a `requestid` is remembered; `None` (default): forever.
    pub requestid_window: Option<Duration>,
    /// Decimals an amount may carry per currency, where it differs from
    /// ISO 4217 (e.g. `("KWD", 2)` to refuse three-decimal amounts);
    /// undocumented by Intuit.
    pub currency_decimals: BTreeMap<String, u32>,
    /// The company's UTC offset in hours for `MetaData` times (default -8).
    pub utc_offset_hours: i8,
    /// Sends `Retry-After: 60` with throttling 429s (default `false`;
    /// undocumented).
    pub retry_after: bool,
    /// Added before every response.
    pub latency: Duration,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            realm_id: "9341453000000001".into(),
            company_name: "Sandbox Company_US_1".into(),
            home_currency: "USD".into(),
            multicurrency: false,
            custom_fields: vec!["Stripe ID".into()],
            items: vec!["1".into()],
            batch_max_items: 30,
            requests_per_minute: 500,
            batch_per_minute: 40,
            max_concurrent: 10,
            meter_batch_items: true,
            access_token_ttl: Duration::from_secs(3600),
            rotate_refresh_tokens: true,
            refresh_grace: None,
            duplicate_docnumber_error: false,
            subtotal_line: true,
            default_max_results: 100,
            maxresults_over_limit_fails: false,
            requestid_window: None,
            currency_decimals: BTreeMap::new(),
            utc_offset_hours: -8,
            retry_after: false,
            latency: Duration::ZERO,
        }
    }
}

/// The transaction entities the emulator stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `Invoice`.
    Invoice,
    /// `SalesReceipt`.
    SalesReceipt,
    /// `Customer`.
    Customer,
}

impl Kind {
    /// The entity name (`Invoice`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Invoice => "Invoice",
            Kind::SalesReceipt => "SalesReceipt",
            Kind::Customer => "Customer",
        }
    }

    /// By entity name or lower-case path segment.
    pub fn parse(s: &str) -> Option<Kind> {
        match s.to_ascii_lowercase().as_str() {
            "invoice" => Some(Kind::Invoice),
            "salesreceipt" => Some(Kind::SalesReceipt),
            "customer" => Some(Kind::Customer),
            _ => None,
        }
    }
}

/// Counters besides the transport's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// The transport's counters.
    pub transport: Stats,
    /// Requests by route (`query`, `create`, `update`, `batch`, `read`,
    /// `token`, `companyinfo`, `preferences`).
    pub by_route: BTreeMap<String, u64>,
    /// Answers replayed for a repeated `requestid`.
    pub replays: u64,
    /// Refreshes granted.
    pub refreshes: u64,
    /// Refreshes refused with `invalid_grant`.
    pub invalid_grants: u64,
    /// `minorversion` values seen on API requests.
    pub minorversions: BTreeMap<String, u64>,
    /// Items of batch requests served.
    pub batch_items: u64,
    /// Most items in one batch request.
    pub max_batch_items: usize,
}

/// A running emulator; dropping it stops the server.
pub struct Emulator {
    /// `http://127.0.0.1:PORT`: the API base (`{base_url}/v3/company/…`)
    /// and the OAuth host (`{base_url}/oauth2/v1/tokens/bearer`).
    pub base_url: String,
    /// The company ID.
    pub realm_id: String,
    /// The app's client ID.
    pub client_id: String,
    /// The app's client secret.
    pub client_secret: String,
    /// The refresh token the company's connection started with.
    pub refresh_token: String,
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Starts an emulator on `127.0.0.1` with a fresh port.
    pub async fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let realm_id = config.realm_id.clone();
        let shared = Arc::new(Shared::new(config));
        let refresh_token = shared.issue_refresh_token();
        let server = Server::spawn(listener, server::router(shared.clone()));
        Ok(Emulator {
            base_url,
            realm_id,
            client_id: shared.client_id.clone(),
            client_secret: shared.client_secret.clone(),
            refresh_token,
            shared,
            server,
        })
    }

    /// The token endpoint's URL.
    pub fn token_url(&self) -> String {
        format!("{}/oauth2/v1/tokens/bearer", self.base_url)
    }

    /// Stores `entity` as QuickBooks would after a create (Id, SyncToken,
    /// MetaData, TotalAmt, currency filled in where missing; `MetaData`
    /// and `TxnDate` kept when given, for seeding old records); returns its `Id`.
    pub fn insert(&self, kind: Kind, entity: Value) -> String {
        self.shared.seed(kind, entity)
    }

    /// A customer `display_name` with `email` (and its currency in a
    /// multicurrency company); returns its `Id`.
    pub fn add_customer(&self, display_name: &str, email: &str, currency: Option<&str>) -> String {
        let mut c = serde_json::json!({
            "DisplayName": display_name,
            "PrimaryEmailAddr": {"Address": email},
            "Active": true,
        });
        if let Some(cur) = currency {
            c["CurrencyRef"] = serde_json::json!({"value": cur});
        }
        self.shared.seed(Kind::Customer, c)
    }

    /// Every stored entity of `kind`, by `Id`.
    pub fn entities(&self, kind: Kind) -> Vec<Value> {
        self.shared.entities(kind)
    }

    /// Another user edits entity `id`: its `SyncToken` moves on.
    pub fn bump_sync_token(&self, id: &str) {
        self.shared.bump_sync_token(id);
    }

    /// Another user saves entity `id` just before the next update of it
    /// arrives: that update's `SyncToken` is stale.
    pub fn edit_before_next_update(&self, id: &str) {
        self.shared.edit_before_next_update(id);
    }

    /// The company disconnects the app: every refresh token and access
    /// token stops working.
    pub fn revoke_all(&self) {
        self.shared.revoke_all();
    }

    /// Every access token expires now.
    pub fn expire_access_tokens(&self) {
        self.shared.expire_access_tokens();
    }

    /// The refresh tokens that work now.
    pub fn valid_refresh_tokens(&self) -> Vec<String> {
        self.shared.valid_refresh_tokens()
    }

    /// Every token (access and refresh) ever issued, to check none leaked.
    pub fn issued_tokens(&self) -> Vec<String> {
        self.shared.issued_tokens()
    }

    /// Replaces the transport fault plan of the API routes (OAuth routes
    /// are never faulted); the next API request is number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault<TransportFault>>) {
        self.shared.transport.set_faults(faults);
    }

    /// Faults for batch requests only, counted over batch requests (the
    /// shared plan of [`Emulator::set_faults`] wins where both strike).
    pub fn set_batch_faults(&self, faults: Vec<Fault<TransportFault>>) {
        *self.shared.batch_faults.lock().unwrap() = recon_emulator_kit::FaultPlan::new(faults);
    }

    /// Counters since the start.
    pub fn stats(&self) -> EmuStats {
        self.shared.stats()
    }

    /// Stops the server.
    pub async fn shutdown(mut self) {
        self.server.shutdown().await;
    }
}
