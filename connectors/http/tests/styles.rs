//! The declarative connector against the crate's emulator, over real HTTP
//! on 127.0.0.1: each paging style reads exactly the window (id for id,
//! cent for cent) through faults, a strict rate counter never counts a
//! request over the declared rate, and config errors name the key, the
//! path and the answer.

use std::time::Duration;

use futures_util::TryStreamExt;
use recon_core::{
    BuildContext, ConnectorConfig, ConnectorError, Currency, Field, FieldKind, Money, Record,
    Schema, Source, Value, Window,
};
use recon_http::emulator::{Emulator, EmulatorConfig, Fault, Item, TransportFault};
use recon_http::HttpSettings;

pub fn schema() -> Schema {
    let f = |name: &str, kind| Field {
        name: name.into(),
        kind,
        compared: true,
    };
    Schema {
        fields: vec![
            f("amount", FieldKind::Money),
            f("currency", FieldKind::Currency),
            f("status", FieldKind::Text),
            f("created", FieldKind::Timestamp),
        ],
    }
}

const T0: i64 = 1_795_824_000; // 2026-11-28T00:00:00Z

/// 60 charges, 53 minutes apart, in three currencies (JPY has no minor
/// unit), amounts up to 10^13 minor units.
fn items() -> Vec<Item> {
    let currencies = ["USD", "EUR", "JPY"];
    (0..60u64)
        .map(|i| Item {
            id: 1000 + i,
            amount: (i as i64) * 1_234_567 + if i == 59 { 9_999_999_999_999 } else { 7 },
            currency: currencies[(i % 3) as usize].into(),
            status: if i % 4 == 0 { "open" } else { "paid" }.into(),
            created: T0 + (i as i64) * 53 * 60,
        })
        .collect()
}

/// From item 9 (included) to item 47 (excluded): edges on records.
fn window() -> Window {
    Window {
        start: jiff::Timestamp::from_second(T0 + 9 * 53 * 60).unwrap(),
        end: jiff::Timestamp::from_second(T0 + 47 * 53 * 60).unwrap(),
    }
}

fn expected(key: impl Fn(u64) -> String) -> Vec<Record> {
    let w = window();
    let mut out: Vec<Record> = items()
        .into_iter()
        .filter(|i| w.contains(jiff::Timestamp::from_second(i.created).unwrap()))
        .map(|i| {
            let c = Currency::parse(&i.currency).unwrap();
            Record {
                key: key(i.id),
                values: vec![
                    Value::Money(Money::from_minor(i.amount, c)),
                    Value::Currency(c),
                    Value::Text(i.status),
                    Value::Timestamp(jiff::Timestamp::from_second(i.created).unwrap()),
                ],
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

pub fn settings(text: &str) -> HttpSettings {
    toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub async fn source(text: &str) -> Result<Box<dyn Source>, ConnectorError> {
    let schema = schema();
    settings(text)
        .build_source(BuildContext {
            schema: &schema,
            time_field: Some(3),
            job: "http",
            tokens: None,
        })
        .await
}

pub async fn read(src: &dyn Source, w: Window) -> Result<Vec<Record>, ConnectorError> {
    let pages: Vec<_> = src.read(w).try_collect().await?;
    let mut out: Vec<Record> = pages.into_iter().flat_map(|p| p.records).collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// GitHub REST: `Link` header, a bare array, `X-RateLimit-*`.
fn github(emu: &Emulator, rate: &str, per_page: u32) -> String {
    format!(
        r#"
name = "Acme (GitHub style)"
base_url = "{}"
auth = {{ kind = "bearer", token = "{}" }}
rate = "{rate}"
rate_limit_headers = "x-ratelimit"
request_id_header = "X-GitHub-Request-Id"
fields = {{ amount = "$.amount", currency = "$.currency", status = "$.state", created = "$.created_at" }}
amount_format = "major"
[list]
path = "/link/items"
query = {{ since = "{{{{ start }}}}", until = "{{{{ end | rfc3339 }}}}", per_page = "{per_page}" }}
records = "$[*]"
paging = {{ kind = "link_header" }}
"#,
        emu.base_url, emu.token
    )
}

/// Pipedrive v1: `start`/`limit`, `more_items_in_collection`, no date
/// filter, `api_token` in the query, naive UTC times.
fn pipedrive(emu: &Emulator) -> String {
    format!(
        r#"
name = "Acme (Pipedrive style)"
base_url = "{}"
auth = {{ kind = "api_key", query = "api_token", value = "{}" }}
rate = "100/s"
fields = {{ amount = "$.value", currency = "$.currency", status = "$.status", created = "$.add_time" }}
amount_format = "major"
naive_timestamps_are_utc = true
[list]
path = "/offset/items"
records = "$.data[*]"
window = "client"
paging = {{ kind = "offset", offset_param = "start", limit_param = "limit", limit = 7, more = "$.additional_data.pagination.more_items_in_collection" }}
"#,
        emu.base_url, emu.token
    )
}

/// Harvest v2: page numbers with `total_pages`, date filters; OAuth 2.0
/// client credentials.
fn harvest(emu: &Emulator) -> String {
    let c = EmulatorConfig::default().client;
    format!(
        r#"
name = "Acme (Harvest style)"
base_url = "{url}"
auth = {{ kind = "oauth_client_credentials", token_url = "{url}/oauth/token", client_id = "{}", client_secret = "{}" }}
rate = "100/15s"
fields = {{ amount = "$.amount", currency = "$.currency", status = "$.state", created = "$.created_at" }}
amount_format = "major"
[list]
path = "/page/items"
query = {{ from = "{{{{ start | date }}}}", to = "{{{{ end | date }}}}" }}
records = "$.invoices[*]"
paging = {{ kind = "page", size_param = "per_page", size = 7, total_pages = "$.total_pages" }}
"#,
        c.0,
        c.1,
        url = emu.base_url,
    )
}

/// Zendesk cursor pagination: `links.next`, IETF `ratelimit-*` headers,
/// the key in a header.
fn zendesk(emu: &Emulator) -> String {
    format!(
        r#"
name = "Acme (Zendesk style)"
base_url = "{}"
auth = {{ kind = "api_key", header = "X-Api-Key", value = "{}" }}
rate = "100/s"
rate_limit_headers = "ietf"
fields = {{ amount = "$.amount_cents", currency = "$.currency", status = "$.status", created = "$.created_at" }}
[list]
path = "/next/items"
query = {{ start_time = "{{{{ start | unix }}}}", end_time = "{{{{ end | unix }}}}", "page[size]" = "7" }}
records = "$.items[*]"
paging = {{ kind = "next_url", next = "$.links.next" }}
"#,
        emu.base_url, emu.token
    )
}

/// Notion: a POST query, paging and window in the JSON body.
fn notion(emu: &Emulator) -> String {
    format!(
        r#"
name = "Acme (Notion style)"
base_url = "{}/notion"
auth = {{ kind = "bearer", token = "{}" }}
headers = {{ "Notion-Version" = "2022-06-28" }}
rate = "100/s"
fields = {{ amount = "$.properties.Amount.number", currency = "$.properties.Currency.select.name", status = "$.properties.Status.status.name", created = "$.created_time" }}
amount_format = "major"
[list]
method = "POST"
path = "/v1/databases/db1/query"
records = "$.results[*]"
paging_in = "body"
paging = {{ kind = "next_cursor", param = "start_cursor", cursor = "$.next_cursor" }}
body = {{ page_size = 7, filter = {{ and = [ {{ timestamp = "created_time", created_time = {{ on_or_after = "{{{{ start }}}}" }} }}, {{ timestamp = "created_time", created_time = {{ before = "{{{{ end }}}}" }} }} ] }} }}
"#,
        emu.base_url, emu.token
    )
}

async fn emulator(config: EmulatorConfig) -> Emulator {
    let emu = Emulator::start(config).await.unwrap();
    emu.insert_items(items());
    emu
}

fn fault(kind: TransportFault, after: u64, times: u64) -> Fault<TransportFault> {
    Fault { kind, after, times }
}

#[tokio::test(start_paused = true)]
async fn every_paging_style_reads_exactly_the_window() {
    let emu = emulator(EmulatorConfig::default()).await;
    let numeric = |id: u64| id.to_string();
    let want = expected(numeric);
    assert_eq!(want.len(), 38);
    for (style, config) in [
        ("github", github(&emu, "100/s", 7)),
        ("harvest", harvest(&emu)),
        ("zendesk", zendesk(&emu)),
    ] {
        let src = source(&config).await.unwrap();
        let got = read(src.as_ref(), window()).await.unwrap();
        assert_eq!(got, want, "{style}");
    }
    let src = source(&pipedrive(&emu)).await.unwrap();
    let got = read(src.as_ref(), window()).await.unwrap();
    assert_eq!(got, expected(|id| format!("it_{id}")), "pipedrive");
    // Notion: the cursor and the window in the POST body, 7 per page.
    let before = emu.stats().transport.requests;
    let src = source(&notion(&emu)).await.unwrap();
    let got = read(src.as_ref(), window()).await.unwrap();
    assert_eq!(
        got,
        expected(|id| format!("8e2c1f0a-0000-4000-8000-{id:012}")),
        "notion"
    );
    assert_eq!(
        emu.stats().transport.requests - before,
        6,
        "38 records, 7 a page"
    );
    // Pipedrive's style cannot filter: every page of all 60 was listed.
    let s = emu.stats();
    assert_eq!(s.tokens, 1, "one OAuth token for the Harvest-style reads");
    assert_eq!(s.over_limit, 0);
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn faults_are_retried_and_change_nothing() {
    let emu = emulator(EmulatorConfig::default()).await;
    let want = expected(|id| id.to_string());
    for config in [github(&emu, "100/s", 7), zendesk(&emu)] {
        emu.set_faults(vec![
            fault(TransportFault::RateLimited, 0, 2),
            fault(TransportFault::ServerError, 3, 1),
            fault(TransportFault::TruncatedJson, 4, 1),
            fault(TransportFault::DropConnection, 5, 1),
            fault(TransportFault::Unavailable, 6, 1),
            fault(TransportFault::MalformedJson, 7, 1),
        ]);
        let before = emu.stats().transport;
        let src = source(&config).await.unwrap();
        assert_eq!(read(src.as_ref(), window()).await.unwrap(), want);
        let after = emu.stats().transport;
        let n =
            |s: &recon_http::emulator::Stats, code| s.by_status.get(&code).copied().unwrap_or(0);
        assert_eq!(n(&after, 429) - n(&before, 429), 2);
        assert_eq!(n(&after, 500) - n(&before, 500), 1);
        assert_eq!(n(&after, 503) - n(&before, 503), 1);
        // 6 pages of 7 and a retry for each of the 7 faults.
        assert_eq!(after.requests - before.requests, 6 + 7);
    }
    emu.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_declared_rate_is_kept_in_every_window() {
    let emu = emulator(EmulatorConfig {
        rate_limit: Some((5, Duration::from_secs(1))),
        ..EmulatorConfig::default()
    })
    .await;
    let started = tokio::time::Instant::now();
    let src = source(&github(&emu, "5/s", 2)).await.unwrap();
    let got = read(src.as_ref(), window()).await.unwrap();
    assert_eq!(got, expected(|id| id.to_string()));
    let s = emu.stats();
    assert_eq!(s.over_limit, 0, "{s:?}");
    assert_eq!(s.transport.requests, 19, "38 records, 2 per page");
    // 19 requests at 5/s take at least 3.6 s of (virtual) time.
    assert!(
        started.elapsed() >= Duration::from_millis(3600),
        "{:?}",
        started.elapsed()
    );

    // Declared faster than the API allows, but paced by the API's
    // X-RateLimit-Remaining/-Reset: still nothing over the limit.
    let src = source(&github(&emu, "50/s", 2)).await.unwrap();
    assert_eq!(
        read(src.as_ref(), window()).await.unwrap(),
        expected(|id| id.to_string())
    );
    assert_eq!(emu.stats().over_limit, 0, "{:?}", emu.stats());

    // The same with the IETF draft's RateLimit-Remaining/-Reset.
    let ietf = zendesk(&emu)
        .replace("rate = \"100/s\"", "rate = \"50/s\"")
        .replace("\"page[size]\" = \"7\"", "\"page[size]\" = \"2\"");
    let src = source(&ietf).await.unwrap();
    assert_eq!(
        read(src.as_ref(), window()).await.unwrap(),
        expected(|id| id.to_string())
    );
    assert_eq!(emu.stats().over_limit, 0, "{:?}", emu.stats());

    // Without the headers: the strict counter refuses, the shared policy
    // waits out Retry-After, and the read is still exact.
    let blind = github(&emu, "50/s", 2).replace("rate_limit_headers = \"x-ratelimit\"\n", "");
    let src = source(&blind).await.unwrap();
    assert_eq!(
        read(src.as_ref(), window()).await.unwrap(),
        expected(|id| id.to_string())
    );
    assert!(emu.stats().over_limit > 0, "{:?}", emu.stats());
    emu.shutdown().await;
}

/// OAuth 2.0 client credentials: one token for every request, a new one
/// after a 401 of an expired token, the secret never shown.
#[tokio::test(start_paused = true)]
async fn oauth_tokens_are_fetched_once_and_again_after_a_401() {
    let emu = emulator(EmulatorConfig::default()).await;
    let src = source(&harvest(&emu)).await.unwrap();
    let want = expected(|id| id.to_string());
    assert_eq!(read(src.as_ref(), window()).await.unwrap(), want);
    assert_eq!(emu.stats().tokens, 1, "one token for all 6 pages");
    emu.expire_tokens();
    assert_eq!(read(src.as_ref(), window()).await.unwrap(), want);
    assert_eq!(
        emu.stats().by_401(),
        1,
        "the expired token was refused once"
    );
    assert_eq!(
        emu.stats().tokens,
        1,
        "one new token (the old one forgotten)"
    );
    let wrong = harvest(&emu).replace(&EmulatorConfig::default().client.1, "not-the-secret-4242");
    let e = read(source(&wrong).await.unwrap().as_ref(), window())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("401") && e.contains("Client authentication failed") && e.contains("auth"),
        "{e}"
    );
    assert!(!e.contains("not-the-secret-4242"), "{e}");
    emu.shutdown().await;
}

/// A token store in memory, as the state store keeps them.
#[derive(Default)]
struct MemoryTokens(std::sync::Mutex<std::collections::HashMap<String, String>>);

#[async_trait::async_trait]
impl recon_core::TokenStore for MemoryTokens {
    async fn get(&self, name: &str) -> Result<Option<String>, ConnectorError> {
        Ok(self.0.lock().unwrap().get(name).cloned())
    }
    async fn put(&self, name: &str, value: &str) -> Result<(), ConnectorError> {
        self.0
            .lock()
            .unwrap()
            .insert(name.to_string(), value.to_string());
        Ok(())
    }
}

async fn source_with(
    text: &str,
    tokens: &std::sync::Arc<dyn recon_core::TokenStore>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let schema = schema();
    settings(text)
        .build_source(BuildContext {
            schema: &schema,
            time_field: Some(3),
            job: "http",
            tokens: Some(tokens),
        })
        .await
}

/// OAuth 2.0 refresh grant with a rotating refresh token (the Harvest
/// style, client by HTTP Basic): the newest token is saved sealed in the
/// store and used by the next build, whose configured token is stale by
/// then; a revoked one stops with the steps to reconnect; no token in any
/// message or in the store's clear text.
#[tokio::test(start_paused = true)]
async fn rotated_refresh_tokens_are_kept_sealed_and_a_revoked_one_says_how_to_reconnect() {
    let emu = emulator(EmulatorConfig::default()).await;
    let c = EmulatorConfig::default();
    let first = c.refresh_token.clone();
    let config = harvest(&emu).replace(
        r#"kind = "oauth_client_credentials","#,
        &format!(r#"kind = "oauth_refresh_token", refresh_token = "{first}","#),
    );
    assert!(config.contains("oauth_refresh_token"), "{config}");
    let memory = std::sync::Arc::new(MemoryTokens::default());
    let store: std::sync::Arc<dyn recon_core::TokenStore> = memory.clone();
    let want = expected(|id| id.to_string());

    let src = source_with(&config, &store).await.unwrap();
    assert_eq!(read(src.as_ref(), window()).await.unwrap(), want);
    assert_eq!(emu.refreshes(), 1);
    let second = emu.refresh_token().unwrap();
    assert_ne!(second, first, "the endpoint rotated the token");
    let saved = memory.get_all();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(saved[0].0.starts_with("http/") && saved[0].0.ends_with("/refresh_token"));
    assert!(
        !saved[0].1.contains(&second) && !saved[0].1.contains(&first),
        "sealed, not in clear"
    );

    // The next run: the configured token was rotated away; the saved one works.
    let src = source_with(&config, &store).await.unwrap();
    assert_eq!(read(src.as_ref(), window()).await.unwrap(), want);
    assert_eq!(emu.refreshes(), 2, "one refresh, with the saved token");
    assert_ne!(emu.refresh_token().unwrap(), second);

    // Revoked (the user disconnected the app): exit-2 material with the steps.
    emu.revoke_refresh_token();
    let src = source_with(&config, &store).await.unwrap();
    let e = read(src.as_ref(), window()).await.unwrap_err();
    assert!(matches!(e, ConnectorError::Config(_)), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("invalid_grant") && e.contains("authorize the app again"),
        "{e}"
    );
    for t in [&first, &second] {
        assert!(!e.contains(t.as_str()), "{e}");
    }
    emu.shutdown().await;
}

impl MemoryTokens {
    fn get_all(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone().into_iter().collect()
    }
}

#[tokio::test(start_paused = true)]
async fn a_wrong_token_is_refused_without_showing_it() {
    let emu = emulator(EmulatorConfig::default()).await;
    let config = zendesk(&emu).replace(&emu.token, "wrong_token_value_1234");
    let src = source(&config).await.unwrap();
    let e = read(src.as_ref(), window()).await.unwrap_err().to_string();
    assert!(e.contains("401") && e.contains("auth"), "{e}");
    assert!(!e.contains("wrong_token_value_1234"), "{e}");
    emu.shutdown().await;
}

/// Each kind of key that can fail against an answer names the key, the
/// JSONPath or template and the first 200 bytes of the answer.
#[tokio::test(start_paused = true)]
async fn config_errors_name_the_key_the_path_and_the_answer() {
    let emu = emulator(EmulatorConfig::default()).await;
    let base = zendesk(&emu);
    let fails = |config: String| async move {
        let src = source(&config).await?;
        read(src.as_ref(), window()).await.map(|_| ())
    };
    let cases = [
        (
            base.replace("records = \"$.items[*]\"", "records = \"$.tickets[*]\""),
            vec!["list.records = \"$.tickets[*]\" matched nothing", "GET /next/items", "{\"items\":[{"],
        ),
        (
            base.replace("records = \"$.items[*]\"", "records = \"$.meta[*]\""),
            vec!["list.records = \"$.meta[*]\"", "first 200 bytes"],
        ),
        (
            format!("id = \"$.uuid\"\n{base}"),
            vec!["id = \"$.uuid\" matched nothing in a record", "\"amount_cents\""],
        ),
        (
            base.replace("status = \"$.status\"", "status = \"$.meta\"").replace(
                "amount = \"$.amount_cents\"",
                "amount = \"$.created_at\"",
            ),
            vec!["fields.amount = \"$.created_at\"", "is not"],
        ),
        (
            base.replace(
                "paging = { kind = \"next_url\", next = \"$.links.next\" }",
                "paging = { kind = \"cursor\", param = \"page[after]\", has_more = \"$.meta.more\" }",
            ),
            vec!["list.paging.has_more = \"$.meta.more\" matched nothing", "{\"items\":"],
        ),
        (
            base.replace(
                "paging = { kind = \"next_url\", next = \"$.links.next\" }",
                "paging = { kind = \"next_url\", next = \"$.meta.has_more\" }",
            ),
            vec!["list.paging.next = \"$.meta.has_more\" found true where a URL should be"],
        ),
    ];
    for (config, needles) in cases {
        let e = fails(config).await.unwrap_err().to_string();
        for n in needles {
            assert!(e.contains(n), "{n:?} not in: {e}");
        }
        assert!(!e.contains(&emu.token), "{e}");
    }
    // Templates and paths are checked when the job is loaded.
    for (config, needles) in [
        (
            base.replace("{{ end | unix }}", "{{ end | epoch }}"),
            vec!["list.query.end_time", "epoch", "unix_ms"],
        ),
        (
            base.replace("{{ start | unix }}", "{{ stat | unix }}"),
            vec!["list.query.start_time", "{{ stat }}", "start, end"],
        ),
        (
            base.replace("[list]", "[list]\npaging_in = \"body\""),
            vec!["list.paging_in = \"body\"", "list.body"],
        ),
        (
            base.replace("created = \"$.created_at\"", "created = \"created_at\""),
            vec!["fields.created = \"created_at\" is not a JSONPath"],
        ),
        (
            base.replace(
                "start_time = \"{{ start | unix }}\", end_time = \"{{ end | unix }}\", ",
                "",
            ),
            vec![
                "list: the request does not use the window",
                "list.window = \"client\"",
            ],
        ),
    ] {
        let e = match source(&config).await {
            Ok(_) => panic!("built: {config}"),
            Err(e) => e.to_string(),
        };
        for n in needles {
            assert!(e.contains(n), "{n:?} not in: {e}");
        }
    }
    emu.shutdown().await;
}

/// `examples/http/NAME`, its `${VAR}`s replaced, the `side` table of its
/// one job as connector settings.
fn example(name: &str, side: &str, vars: &[(&str, &str)]) -> HttpSettings {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/http")
        .join(name);
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (k, v) in vars {
        text = text.replace(&format!("${{{k}}}"), v);
    }
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let jobs = doc["jobs"].as_table().unwrap();
    assert_eq!(jobs.len(), 1, "{name}");
    let job = jobs.values().next().unwrap().as_table().unwrap();
    let mut table = job[side].as_table().unwrap().clone();
    assert_eq!(
        table
            .remove("type")
            .and_then(|t| t.as_str().map(String::from))
            .as_deref(),
        Some("http")
    );
    table.try_into().unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The examples of the emulated styles read the emulator exactly; the
/// others build.
#[tokio::test(start_paused = true)]
async fn the_examples_read_their_emulated_style_exactly() {
    let emu = emulator(EmulatorConfig::default()).await;
    let (id, secret) = EmulatorConfig::default().client;
    let vars = [
        ("ACME_BASE_URL", emu.base_url.as_str()),
        ("ACME_TOKEN", emu.token.as_str()),
        ("PIPEDRIVE_TOKEN", emu.token.as_str()),
        ("HARVEST_CLIENT_ID", id.as_str()),
        ("HARVEST_CLIENT_SECRET", secret.as_str()),
        ("NOTION_DATABASE_ID", "a1b2c3"),
    ];
    let schema = schema();
    let cx = BuildContext {
        schema: &schema,
        time_field: Some(3),
        job: "http",
        tokens: None,
    };
    for (file, prefix) in [
        (
            "notion-body-cursor.toml",
            "8e2c1f0a-0000-4000-8000-00000000",
        ),
        ("github-link-header.toml", ""),
        ("pipedrive-offset.toml", "it_"),
        ("harvest-page-number.toml", ""),
        ("zendesk-next-url.toml", ""),
    ] {
        let src = example(file, "source", &vars)
            .build_source(cx)
            .await
            .unwrap();
        let got = read(src.as_ref(), window()).await.unwrap();
        assert_eq!(got, expected(|id| format!("{prefix}{id}")), "{file}");
    }
    assert_eq!(emu.stats().over_limit, 0);
    for (file, side) in [
        ("stripe-charges.toml", "source"),
        ("rest-target.toml", "target"),
        ("hubspot-deals.toml", "target"),
    ] {
        let s = example(file, side, &[]);
        if side == "target" {
            s.build_target(cx)
                .await
                .unwrap()
                .check_idempotent()
                .await
                .unwrap();
        } else {
            s.build_source(cx).await.unwrap();
        }
    }
    emu.shutdown().await;
}
