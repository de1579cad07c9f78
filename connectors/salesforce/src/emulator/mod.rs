//! An emulator of the Salesforce REST API (OAuth 2.0 client credentials,
//! limits, describe, SOQL query, sObject Collections upsert) and Bulk API 2.0
//! (query and ingest jobs), served over real HTTP on `127.0.0.1`, for tests,
//! benchmarks and demos. Built on `recon_emulator_kit` like the Stripe,
//! HubSpot and Shopify emulators: the same listener (for dropped
//! connections), server task and fault plans.
//!
//! # Endpoints
//!
//! | Method and path | Route name in [`EmulatorStats::by_route`] |
//! |---|---|
//! | `POST /services/oauth2/token` (`grant_type=client_credentials`) | `token` |
//! | `GET /services/data/` (versions; not counted, no limit header) | `versions` |
//! | `GET /services/data/vXX.X/limits` | `limits` |
//! | `GET /services/data/vXX.X/sobjects/{SObject}/describe` | `describe` |
//! | `GET /services/data/vXX.X/query?q=SOQL` | `query` |
//! | `GET /services/data/vXX.X/query/{locator}-{offset}` (`nextRecordsUrl`) | `query_more` |
//! | `PATCH /services/data/vXX.X/composite/sobjects/{SObject}/{ExternalIdField}` | `composite_upsert` |
//! | `POST /services/data/vXX.X/composite/sobjects` (create) | `composite_create` |
//! | `POST /services/data/vXX.X/jobs/query` | `bulk_query_create` |
//! | `GET /services/data/vXX.X/jobs/query/{id}` (`PATCH`: abort) | `bulk_query_info` (`bulk_query_abort`) |
//! | `GET /services/data/vXX.X/jobs/query/{id}/results` | `bulk_query_results` |
//! | `POST /services/data/vXX.X/jobs/ingest` | `bulk_ingest_create` |
//! | `PUT /services/data/vXX.X/jobs/ingest/{id}/batches` | `bulk_ingest_upload` |
//! | `PATCH /services/data/vXX.X/jobs/ingest/{id}` (`UploadComplete`, `Aborted`) | `bulk_ingest_state` |
//! | `GET /services/data/vXX.X/jobs/ingest/{id}` | `bulk_ingest_info` |
//! | `GET …/jobs/ingest/{id}/successfulResults`, `/failedResults`, `/unprocessedrecords` | `bulk_ingest_successful`, `_failed`, `_unprocessed` |
//!
//! The versions served are those of [`EmulatorConfig::served_versions`]
//! (`GET /services/data/`, REST API "Versions": "Lists summary information
//! about each Salesforce version currently available, including the
//! version, label, and a link to each version's root"; no authentication,
//! not counted). Any path under `/services/data/vXX.X/` of a version the
//! org does not serve is `404
//! [{"errorCode":"NOT_FOUND","message":"The requested resource does not exist"}]`,
//! the same answer as for an sObject the org does not have (so a client
//! tells the two apart only by listing the versions); answered before
//! auth, not counted. Errors are Salesforce's JSON array,
//! `[{"message": …, "errorCode": …}]`; per-record errors of sObject
//! Collections are `{"statusCode", "message", "fields"}`.
//!
//! # Auth
//!
//! The token endpoint takes the configured client id and secret in the form
//! body (or as HTTP Basic auth) and answers `{"access_token", "signature",
//! "scope", "instance_url", "id", "token_type": "Bearer", "issued_at"}`
//! (Salesforce Help, "OAuth 2.0 Client Credentials Flow for
//! Server-to-Server Integration", and its sample response). A wrong client
//! id is `400 {"error":"invalid_client_id"}`, a wrong secret `400
//! {"error":"invalid_client"}`, another grant type
//! `unsupported_grant_type`. Every `/services/data/vXX.X/…` call needs
//! `Authorization: Bearer <token>` (or the older `OAuth <token>`); a missing,
//! unknown, expired ([`EmulatorConfig::token_ttl`]) or revoked
//! ([`Emulator::expire_tokens`]) token is `401
//! [{"message":"Session expired or invalid","errorCode":"INVALID_SESSION_ID"}]`.
//! [`Emulator::issue_token`] hands out a token directly, as orgs that issue
//! a static token do.
//!
//! # The daily API allowance
//!
//! Every authenticated `/services/data/vXX.X/…` response carries
//! `Sforce-Limit-Info: api-usage=N/M` — N calls used in the org today,
//! this one included, of M ("Limit Info Header": "returned in each request
//! to REST API … except for calls to the version URI, `/`, because they
//! don't count against the org's limits"). The allowance is the org's, shared
//! with its other integrations ([`Emulator::set_api_usage`]). Once N has
//! reached M, calls are refused with `403
//! [{"message":"TotalRequests Limit exceeded.","errorCode":"REQUEST_LIMIT_EXCEEDED"}]`
//! and not counted ("API Request Limits and Allocations").
//!
//! What counts: every authenticated data call, whatever its outcome —
//! REST resources and every Bulk API 2.0 request, result downloads included.
//! Not counted: the token endpoint, `GET /services/data/` (documented as not
//! counting), requests refused before auth (`401`, injected faults, the
//! 16,384-byte URI limit). I found no Salesforce page saying that Bulk API 2.0
//! result downloads are free: the Bulk API 2.0 limits pages limit jobs,
//! batches and records, not calls, and the REST pages count every request;
//! so downloads count. [`EmulatorStats::api_calls`] is the count.
//!
//! # Values
//!
//! Field types: `string`, `currency`, `double`, `percent`, `datetime`,
//! `date`, `picklist`, `boolean`, `id`. Decimals are stored as exact decimal
//! text and written as JSON numbers digit for digit (serde_json's
//! `arbitrary_precision`; never `f64`), with at least the field's scale of
//! fraction digits (`"Amount__c": 12.30`). Salesforce does not round or refuse
//! API values with more decimals than the field's scale — "Salesforce does
//! not round values provided through the API … it will be stored exactly as
//! entered, regardless of the field's decimal setting" (Salesforce Help
//! 000385689, "Round Off Decimal Values of Currency Fields in the Salesforce
//! UI and API") — so neither does the emulator; more integer digits than
//! `precision - scale` is `NUMBER_OUTSIDE_VALID_RANGE` ("The maximum number
//! of digits to the left of the decimal place is equal to precision minus
//! scale", SOAP API "Primitive Data Types"). Datetimes hold whole seconds
//! ("Regular dateTime fields are full timestamps with a precision of one
//! second", ibid.; milliseconds written are dropped) and are written
//! `2026-01-02T03:04:05.000+0000` in JSON and `…05.000Z` in Bulk CSV; dates
//! `2026-01-02`. Numeric strings are accepted for number fields; a value that
//! does not convert fails its record with `INVALID_TYPE_ON_FIELD_IN_RECORD`,
//! a string over the field's length with `STRING_TOO_LONG`.
//!
//! Every object has `Id`, `Name` (text 80; a record created without one is
//! named by its Id), `CreatedDate` and `LastModifiedDate`; those but `Name`
//! are read-only through the API (`INVALID_FIELD_FOR_INSERT_UPDATE`).
//!
//! # Field-level permissions
//!
//! A field defined with [`FieldDef::createable`] or
//! [`FieldDef::updateable`] `false` ([`FieldDef::read_only`]: Field-Level
//! Security that leaves the field visible but not editable for the
//! integration user's profile or permission set) shows so in describe
//! (`createable`/`updateable`: "Value for the field can be specified during
//! create using the API", Object Reference "API Field Properties"). A write
//! that sets it anyway is not silently stripped of it: the record fails
//! with `INVALID_FIELD_FOR_INSERT_UPDATE` ("Unable to create/update fields:
//! Status__c. Please check the security settings of this field and verify
//! that it is read/write for your profile or permission set."), in sObject
//! Collections and Bulk API 2.0 ingest alike (the `StatusCode` of SOAP API
//! "Core Data Types Used in API Calls", which REST and Bulk API report as
//! `statusCode` and `sf__Error`). A create is checked against `createable`,
//! an update (an upsert that matched) against `updateable`.
//! `CurrencyIsoCode`, as in multi-currency orgs, exists when
//! [`Emulator::define_object`] lists a field of that name (a 3-letter
//! picklist, `USD` when not given).
//!
//! # Query
//!
//! The SOQL subset and its rules are in the `soql` module's docs. Query
//! results are paged: "up to 2,000 records can be returned at a time"; the
//! page size is `Sforce-Query-Options: batchSize=N` ("The default is 2,000;
//! the minimum is 200, and the maximum is 2,000"; values outside are
//! clamped), and `nextRecordsUrl` is
//! `/services/data/vXX.X/query/01g…-{offset}` ("Execute a SOQL Query"; REST
//! API "Query"). A page can be fetched again. `SELECT COUNT() …` answers
//! `{"totalSize": n, "done": true, "records": []}`. A request URI over
//! 16,384 bytes is `414`, URI and headers together over 16,384 bytes `431`
//! (Salesforce Help 000386264); a SOQL statement over 100,000 characters
//! (only reachable through a Bulk API query job) is `MALFORMED_QUERY`.
//!
//! # sObject Collections upsert
//!
//! `PATCH …/composite/sobjects/{SObject}/{ExternalIdField}` with
//! `{"allOrNone": false, "records": [{"attributes": {"type": …}, …}]}`:
//! up to 200 records (more: `400 EXCEEDED_ID_LIMIT`), each with an
//! `attributes.type` of the URI's object, applied in order; `200` with one
//! result per record, same order: `{"id", "success": true, "errors": [],
//! "created": true|false}` or `{"success": false, "errors": [{"statusCode",
//! "message", "fields"}]}` ("Upsert Records Using sObject Collections").
//! `allOrNone: true` rolls everything back on one failure (the others fail
//! with `ALL_OR_NONE_OPERATION_ROLLED_BACK`). Matching and uniqueness rules
//! are in the `store` module's docs: `DUPLICATE_VALUE`,
//! `DUPLICATE_EXTERNAL_ID`, `REQUIRED_FIELD_MISSING`, `MISSING_ARGUMENT`.
//! An unknown field fails the request (`400 INVALID_FIELD`); a URI field that
//! is not an external ID is `400 INVALID_FIELD`, an unknown one `404`.
//!
//! # Bulk API 2.0
//!
//! See the `bulk` module's docs: job lifecycles, CSV formats, `Sforce-Locator`
//! and `Sforce-NumberOfRecords`, result files.
//!
//! # Faults and latency
//!
//! [`Emulator::set_faults`] takes the shared fault plan
//! (`recon_emulator_kit::FaultPlan`), consulted once per request in arrival
//! order. Error faults answer at once (before auth, not counted):
//! `RateLimited` is a `429` with `Retry-After: 1` (not a documented
//! Salesforce response: what a proxy in front of the org sends),
//! `ServerError` `500 UNKNOWN_EXCEPTION`, `Unavailable` `503
//! SERVER_UNAVAILABLE`, `MalformedJson` a `200` HTML page. `Slow(d)` adds `d`
//! to [`EmulatorConfig::latency`]; `DropConnection` closes the connection
//! without a response and does not process the request; `TruncatedJson`
//! processes it and sends the first half of the body as `200`.
//! `ServerErrorAfterWork` and `DropAfterWork` process the request (counted,
//! like any processed call) and then lose its answer: a `500
//! UNKNOWN_EXCEPTION` instead of it, or the connection closed without a
//! response; a client that resends meets its own first call's work (a
//! `DUPLICATE_VALUE` for each record it created, `409 INVALIDJOBSTATE` for
//! a second `UploadComplete`).
//!
//! [`Emulator::set_route_faults`] takes a plan for one route (by the names
//! of [`EmulatorStats::by_route`]) whose requests are counted from 0 on
//! their own, e.g. to lose the answer of a job's first `UploadComplete`
//! whatever came before it; when both plans pick a fault, the shared one
//! wins.
//!
//! # Documentation followed
//!
//! * REST API Developer Guide: "Versions"
//!   <https://developer.salesforce.com/docs/platform/api-rest/guide/resources-versions.html>;
//!   "List Available REST API Versions" <https://developer.salesforce.com/docs/platform/api-rest/guide/dome-versions.html>;
//!   "Status Codes and Error Responses" (404: "The requested resource couldn't be found. Check the URI for errors")
//!   <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/errorcodes.htm>;
//!   "Limit Info Header"
//!   <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_api_usage.htm>;
//!   "Query Options Header" <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_queryoptions.htm>;
//!   "Execute a SOQL Query" <https://developer.salesforce.com/docs/platform/api-rest/guide/dome-query.html>;
//!   "Query" <https://developer.salesforce.com/docs/platform/api-rest/guide/resources-query.html>;
//!   "Upsert Records Using sObject Collections"
//!   <https://developer.salesforce.com/docs/platform/api-rest/guide/resources-composite-sobjects-collections-upsert.html>;
//!   "List Organization Limits" <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_limits.htm>;
//!   "Valid Date and DateTime Formats" <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/intro_valid_date_formats.htm>;
//!   "Upsert Records Using sObject Rows by External ID" (multiple matches)
//!   <https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/resources_sobject_upsert_patch.htm>.
//! * SOQL and SOSL Reference: "Quoted String Escape Sequences"
//!   <https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/sforce-api-calls-soql-select-quotedstringescapes.html>;
//!   "Reserved Characters" <https://developer.salesforce.com/docs/atlas.en-us.soql_sosl.meta/soql_sosl/sforce_api_calls_soql_select_reservedcharacters.htm>;
//!   "Comparison Operators" <https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/sforce-api-calls-soql-select-comparisonoperators.html>;
//!   "Logical Operators" <https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/sforce-api-calls-soql-select-logicaloperators.html>;
//!   "Date Formats and Date Literals in WHERE" <https://developer.salesforce.com/docs/platform/salesforce-soql-sosl/guide/sforce-api-calls-soql-select-dateformats.html>.
//! * Limits: "API Request Limits and Allocations"
//!   <https://developer.salesforce.com/docs/platform/salesforce-app-limits-cheatsheet/guide/salesforce-app-limits-platform-api.html>;
//!   "SOQL and SOSL Limits for Search Queries"
//!   <https://developer.salesforce.com/docs/atlas.en-us.salesforce_app_limits_cheatsheet.meta/salesforce_app_limits_cheatsheet/salesforce_app_limits_platform_soslsoql.htm>;
//!   "Bulk API and Bulk API 2.0 Limits and Allocations"
//!   <https://developer.salesforce.com/docs/platform/salesforce-app-limits-cheatsheet/guide/salesforce-app-limits-platform-bulkapi.html>;
//!   Salesforce Help 000386264 (URI and header limits)
//!   <https://help.salesforce.com/s/articleView?id=000386264&type=1>.
//! * Bulk API 2.0 Developer Guide: "Get Results for a Query Job"
//!   <https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/query_get_job_results.htm>;
//!   "Understanding Bulk API 2.0 Query" <https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/queries.htm>;
//!   "Create a Job" <https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/create_job.htm>;
//!   "Upload Complete" <https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/close_job.htm>;
//!   "Get Job Successful Record Results" <https://developer.salesforce.com/docs/atlas.en-us.api_asynch.meta/api_asynch/get_job_successful_results.htm>;
//!   "Get Job Failed Record Results" <https://developer.salesforce.com/docs/platform/api-asynch/guide/get-job-failed-results.html>;
//!   "Step 5: Bulk Upsert" <https://developer.salesforce.com/docs/platform/api-asynch/guide/walkthrough-upsert.html>.
//! * OAuth: "OAuth 2.0 Client Credentials Flow for Server-to-Server
//!   Integration" <https://help.salesforce.com/apex/HTViewHelpDoc?id=xcloud.remoteaccess_oauth_client_credentials_flow.htm>.
//! * Upsert matching: Apex Developer Guide "Upserting Records"
//!   <https://developer.salesforce.com/docs/atlas.en-us.apexcode.meta/apexcode/langCon_apex_dml_examples_upsert.htm>;
//!   SOAP API `upsert()` <https://developer.salesforce.com/docs/atlas.en-us.api.meta/api/sforce_api_calls_upsert.htm>.
//! * Types: SOAP API Developer Guide "Primitive Data Types"
//!   <https://developer.salesforce.com/docs/atlas.en-us.api.meta/api/primitive_data_types.htm>
//!   (the text quoted above as found in a public copy,
//!   <https://salesforce-parth.blogspot.com/2015/07/primitive-data-types-salesforce.html>).
//! * Decimals through the API: Salesforce Help 000385689
//!   <https://help.salesforce.com/s/articleView?id=000385689&type=1>.
//! * Field permissions: Object Reference "API Field Properties"
//!   <https://developer.salesforce.com/docs/platform/object-reference/guide/access-for-fields.html>;
//!   SOAP API "Core Data Types Used in API Calls" (`StatusCode`,
//!   `INVALID_FIELD_FOR_INSERT_UPDATE`)
//!   <https://developer.salesforce.com/docs/atlas.en-us.api.meta/api/sforce_api_calls_concepts_core_data_objects.htm>.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use recon_salesforce::emulator::{Emulator, EmulatorConfig, FieldDef};
//! let emu = Emulator::start(EmulatorConfig::default()).await?;
//! emu.define_object(
//!     "Payment__c",
//!     vec![FieldDef::external_id("Stripe_Charge_Id__c"), FieldDef::currency("Amount__c", 2)],
//! );
//! emu.insert("Payment__c", serde_json::json!({"Stripe_Charge_Id__c": "ch_1", "Amount__c": 12.5}));
//! // POST {emu.base_url}/services/oauth2/token with emu.client_id / emu.client_secret,
//! // then GET {instance_url}/services/data/v62.0/query?q=SELECT+Id+FROM+Payment__c
//! emu.shutdown().await;
//! # Ok(()) }
//! ```

mod bulk;
mod server;
mod soql;
mod store;
mod values;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use recon_emulator_kit::{FaultPlan, Server, Stats, TransportFault};
use serde_json::Value;

use server::Shared;
use store::WriteOp;

/// How an [`Emulator`] behaves.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// Added before every response. Requests are served concurrently.
    /// Default zero.
    pub latency: Duration,
    /// The newest API version the org serves, e.g. `"62.0"`.
    pub api_version: String,
    /// The oldest API version the org serves. Default `"31.0"` (versions
    /// 21.0 to 30.0 were retired in Summer '25). `GET /services/data/` lists
    /// every `N.0` from this one to [`EmulatorConfig::api_version`]; a path
    /// under `/services/data/vXX.X/` of another version is `404 NOT_FOUND`.
    pub oldest_api_version: String,
    /// The connected app's consumer key, for the client credentials flow.
    pub client_id: String,
    /// The connected app's consumer secret.
    pub client_secret: String,
    /// The org's daily API request allowance (`M` of `api-usage=N/M`).
    /// Default 100,000.
    pub daily_api_limit: u64,
    /// Tokens older than this get `INVALID_SESSION_ID`. Default `None`
    /// (tokens live until [`Emulator::expire_tokens`]).
    pub token_ttl: Option<Duration>,
    /// How long a Bulk API 2.0 job stays `InProgress`. Default 200 ms.
    pub bulk_poll_delay: Duration,
    /// An ingest job's rows are processed `bulk_poll_delay` after its
    /// `UploadComplete` (by the first request after that), not at once: a
    /// reader sees them only then, and a job closed by a client that died
    /// still lands. Default `false`.
    pub bulk_deferred: bool,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            latency: Duration::ZERO,
            api_version: "62.0".to_owned(),
            oldest_api_version: "31.0".to_owned(),
            client_id: "3MVG9emulator.consumer.key".to_owned(),
            client_secret: "emulator-consumer-secret".to_owned(),
            daily_api_limit: 100_000,
            token_ttl: None,
            bulk_poll_delay: Duration::from_millis(200),
            bulk_deferred: false,
        }
    }
}

impl EmulatorConfig {
    /// The versions the org serves, oldest first: every `N.0` from
    /// `oldest_api_version` to `api_version` (and `api_version` itself).
    pub fn served_versions(&self) -> Vec<String> {
        let major = |v: &str| v.split('.').next().and_then(|m| m.parse::<u32>().ok());
        let mut out: Vec<String> = match (major(&self.oldest_api_version), major(&self.api_version))
        {
            (Some(a), Some(b)) => (a..=b).map(|m| format!("{m}.0")).collect(),
            _ => Vec::new(),
        };
        if !out.contains(&self.api_version) {
            out.push(self.api_version.clone());
        }
        out
    }

    /// Whether the org serves version `v` (`"62.0"`).
    pub fn serves_version(&self, v: &str) -> bool {
        self.served_versions().iter().any(|s| s == v)
    }
}

/// The release a version came with: 31.0 is Summer '14, and three a year
/// since (32.0 Winter '15, 33.0 Spring '15, …, 62.0 Winter '25).
pub(crate) fn release_label(v: &str) -> String {
    let Some(n) = v.split('.').next().and_then(|m| m.parse::<i64>().ok()) else {
        return format!("v{v}");
    };
    let i = n - 31;
    let season = ["Summer", "Winter", "Spring"][i.rem_euclid(3) as usize];
    let year = 14 + (i + 2).div_euclid(3);
    format!("{season} '{:02}", year.rem_euclid(100))
}

/// A field's data type (describe's `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// `string` (Text).
    String,
    /// `currency`: an exact decimal with `scale` fraction digits.
    Currency,
    /// `double` (Number): an exact decimal with `scale` fraction digits.
    Double,
    /// `percent`: an exact decimal with `scale` fraction digits.
    Percent,
    /// `datetime`.
    Datetime,
    /// `date`.
    Date,
    /// `picklist` (values not restricted).
    Picklist,
    /// `boolean` (Checkbox; `false` when not given).
    Boolean,
    /// `id` (only the `Id` field).
    Id,
}

/// A field definition, as describe shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDef {
    /// API name, e.g. `Stripe_Charge_Id__c`.
    pub name: String,
    pub kind: FieldType,
    /// describe's `externalId`: usable as the upsert key.
    pub external_id: bool,
    /// describe's `unique`: no two records share a value.
    pub unique: bool,
    /// describe's `caseSensitive` (for unique fields: "Treat ABC and abc as
    /// different values").
    pub case_sensitive: bool,
    /// Fraction digits of number fields.
    pub scale: u32,
    /// Total digits of number fields.
    pub precision: u32,
    /// Maximum characters of text fields.
    pub length: u32,
    /// Whether the field may be empty (`false`: required on create).
    pub nillable: bool,
    /// describe's `createable`: the user may set it when creating a record.
    /// `false` models a field the integration user's Field-Level Security
    /// leaves read-only (or a formula field): a create that sets it fails
    /// with `INVALID_FIELD_FOR_INSERT_UPDATE` (see the module docs).
    /// Default `true`.
    pub createable: bool,
    /// describe's `updateable`: the user may change it on an existing record;
    /// an update that sets it fails with `INVALID_FIELD_FOR_INSERT_UPDATE`.
    /// Default `true`.
    pub updateable: bool,
}

impl FieldDef {
    fn of(name: &str, kind: FieldType) -> FieldDef {
        FieldDef {
            name: name.to_owned(),
            kind,
            external_id: false,
            unique: false,
            case_sensitive: false,
            scale: 0,
            precision: 0,
            length: 0,
            nillable: true,
            createable: true,
            updateable: true,
        }
    }

    /// This field, read-only for the integration user (Field-Level
    /// Security: visible, not editable): describe says `createable: false`
    /// and `updateable: false`.
    pub fn read_only(self) -> FieldDef {
        FieldDef {
            createable: false,
            updateable: false,
            ..self
        }
    }

    /// A Text(255) field.
    pub fn text(name: &str) -> FieldDef {
        FieldDef {
            length: 255,
            ..FieldDef::of(name, FieldType::String)
        }
    }

    /// A Text(255) field with External ID and Unique (case-insensitive), the
    /// kind of field an upsert keys on.
    pub fn external_id(name: &str) -> FieldDef {
        FieldDef {
            external_id: true,
            unique: true,
            ..FieldDef::text(name)
        }
    }

    /// A Currency(18 - scale, scale) field.
    pub fn currency(name: &str, scale: u32) -> FieldDef {
        FieldDef {
            scale,
            precision: 18,
            ..FieldDef::of(name, FieldType::Currency)
        }
    }

    /// A Date/Time field.
    pub fn datetime(name: &str) -> FieldDef {
        FieldDef::of(name, FieldType::Datetime)
    }

    /// A Date field.
    pub fn date(name: &str) -> FieldDef {
        FieldDef::of(name, FieldType::Date)
    }

    /// A Number(18 - scale, scale) field.
    pub fn double(name: &str, scale: u32) -> FieldDef {
        FieldDef {
            scale,
            precision: 18,
            ..FieldDef::of(name, FieldType::Double)
        }
    }
}

/// A fault to inject instead of (or on top of) the normal response: the
/// kit's transport faults, answered with Salesforce's bodies; see the module
/// docs.
pub type FaultKind = TransportFault;

/// One entry of a fault plan: requests number `after .. after + times`
/// (counted from 0 since [`Emulator::set_faults`]) get `kind`.
pub type Fault = recon_emulator_kit::Fault<FaultKind>;

/// Counters since [`Emulator::start`]: the kit's [`Stats`] (`requests`,
/// dropped connections included; `throttled`; `by_status`; `max_in_flight`;
/// read through `Deref` or `transport`) and Salesforce's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    /// Every emulator's counters.
    pub transport: Stats,
    /// Calls counted against the daily allowance (see the module docs).
    pub api_calls: u64,
    /// Requests received per route (whatever their outcome), by the names
    /// in the module docs; `unknown` for anything else.
    pub by_route: BTreeMap<String, u64>,
    /// Requests to the token endpoint.
    pub token_requests: u64,
}

impl std::ops::Deref for EmulatorStats {
    type Target = Stats;

    fn deref(&self) -> &Stats {
        &self.transport
    }
}

/// A running emulator. Dropping it stops the server too (without waiting).
pub struct Emulator {
    /// The instance URL, which is also the token host:
    /// `"http://127.0.0.1:PORT"`, no trailing slash.
    pub base_url: String,
    /// The accepted consumer key.
    pub client_id: String,
    /// The accepted consumer secret.
    pub client_secret: String,
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Binds `127.0.0.1:0` and serves on a tokio task of the current runtime.
    pub async fn start(cfg: EmulatorConfig) -> std::io::Result<Emulator> {
        let (listener, base_url) = Server::bind().await?;
        let client_id = cfg.client_id.clone();
        let client_secret = cfg.client_secret.clone();
        let shared = Arc::new(Shared::new(cfg, base_url.clone()));
        let app = Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let server = Server::spawn(listener, app);
        Ok(Emulator {
            base_url,
            client_id,
            client_secret,
            shared,
            server,
        })
    }

    /// Defines (or, while it has no records, redefines) an sObject. `Id`,
    /// `Name`, `CreatedDate` and `LastModifiedDate` are implicit; a `Name`
    /// in `fields` replaces the implicit one; `CurrencyIsoCode` is added
    /// only when listed.
    ///
    /// # Panics
    /// When the object already has records.
    pub fn define_object(&self, name: &str, fields: Vec<FieldDef>) {
        let r = self.shared.store.write().unwrap().define(name, fields);
        if let Err(e) = r {
            panic!("emulator define_object({name}): {e}");
        }
    }

    /// Stores a new record and returns its Id. `fields` is a JSON object of
    /// field values as the REST API takes them; `CreatedDate` (and
    /// `LastModifiedDate`) may be given, else they are now.
    ///
    /// # Panics
    /// On an unknown object or field, or a value the API would refuse
    /// (including a duplicate of a unique field).
    pub fn insert(&self, object: &str, fields: Value) -> String {
        let r = (|| {
            let mut store = self.shared.store.write().unwrap();
            let obj = store
                .object_mut(object)
                .ok_or_else(|| format!("no object {object}"))?;
            let map = fields.as_object().ok_or("fields must be a JSON object")?;
            let row = server::json_row(obj, map)
                .map_err(|r| String::from_utf8_lossy(&r.body).into_owned())?
                .map_err(|e| e.message.clone())?;
            match obj
                .write(
                    WriteOp::Insert,
                    vec![Ok(row)],
                    false,
                    true,
                    values::now_ms(),
                )
                .pop()
            {
                Some(Ok((id, _))) => Ok(id),
                Some(Err(e)) => Err(format!("{}: {}", e.code, e.message)),
                None => Err("no result".to_owned()),
            }
        })();
        r.unwrap_or_else(|e: String| panic!("emulator insert into {object}: {e}"))
    }

    /// Every record of `object`, in creation order, with every field as the
    /// REST API writes it (decimals as exact JSON numbers).
    pub fn records(&self, object: &str) -> Vec<Value> {
        let store = self.shared.store.read().unwrap();
        store
            .object(object)
            .map(|o| o.records.iter().map(|r| o.record_json(r)).collect())
            .unwrap_or_default()
    }

    /// A valid access token, as an org that issues static tokens would give.
    pub fn issue_token(&self) -> String {
        self.shared.issue_token()
    }

    /// Revokes every token issued so far: they now get `INVALID_SESSION_ID`.
    /// Tokens issued afterwards are valid.
    pub fn expire_tokens(&self) {
        self.shared.tokens.lock().unwrap().expire_all();
    }

    /// Sets the org's usage of its daily allowance (`used` calls of `max`),
    /// e.g. to model other integrations' use of it.
    pub fn set_api_usage(&self, used: u64, max: u64) {
        let mut u = self.shared.usage.lock().unwrap();
        u.used = used;
        u.max = max;
    }

    /// Replaces the fault plan; the next request is request number 0 of it.
    pub fn set_faults(&self, faults: Vec<Fault>) {
        self.shared.transport.set_faults(faults);
    }

    /// Replaces the fault plan of one route (`"composite_create"`,
    /// `"bulk_ingest_state"`, … as in [`EmulatorStats::by_route`]): the next
    /// request of that route is request number 0 of it.
    pub fn set_route_faults(&self, route: &str, faults: Vec<Fault>) {
        self.shared
            .route_faults
            .lock()
            .unwrap()
            .insert(route.to_owned(), FaultPlan::new(faults));
    }

    pub fn stats(&self) -> EmulatorStats {
        let mut stats = self.shared.stats.lock().unwrap().clone();
        stats.transport = self.shared.transport.stats();
        stats
    }

    /// Stops accepting connections, lets requests in flight finish (for up to
    /// five seconds), and returns once the server task has ended.
    pub async fn shutdown(mut self) {
        self.server.shutdown().await;
    }
}
