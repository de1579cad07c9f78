//! Balance transactions and payouts: the emulator's lists (order, cursors,
//! `limit`, the per-object filters), retrieves and 404s over real HTTP, and
//! the source reading them over a window (paging, slices, the window's
//! edges, negative amounts, lookups) with exact amounts, fees and nets.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Value, Window,
};
use recon_stripe::emulator::{Emulator, EmulatorConfig, ObjectKind};
use recon_stripe::{StripeConfig, StripeObject, StripeSource};
use serde_json::{json, Value as Json};

const START: i64 = 1_795_842_000; // 2026-11-28T05:00:00Z
const END: i64 = START + 86_400;

fn window() -> Window {
    Window {
        start: jiff::Timestamp::from_second(START).unwrap(),
        end: jiff::Timestamp::from_second(END).unwrap(),
    }
}

async fn start() -> Emulator {
    Emulator::start(EmulatorConfig::default()).await.unwrap()
}

/// `GET {path}` with the emulator's key: status and JSON body.
async fn get(emu: &Emulator, path: &str) -> (u16, Json) {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", emu.base_url))
        .bearer_auth(&emu.api_key)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

fn ids(list: &Json) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_error(body: &Json, code: Option<&str>, param: Option<&str>, message: &str) {
    let e = &body["error"];
    assert_eq!(e["type"], "invalid_request_error", "{body}");
    assert_eq!(e["code"].as_str(), code, "{body}");
    assert_eq!(e["param"].as_str(), param, "{body}");
    assert!(
        e["message"].as_str().unwrap().contains(message),
        "{message} in {body}"
    );
}

/// A charge's balance transaction with Stripe's US card fee (2.9% + 30).
fn charge_txn(id: &str, amount: i64, created: i64) -> Json {
    let fee = amount * 29 / 1000 + 30;
    Emulator::balance_transaction(
        id,
        amount,
        fee,
        "usd",
        "charge",
        Some(&format!("ch_{id}")),
        created,
    )
}

#[tokio::test]
async fn balance_transactions_list_newest_first_with_cursors_and_limits() {
    let emu = start().await;
    for i in 0..250 {
        emu.insert(
            ObjectKind::BalanceTransaction,
            charge_txn(&format!("txn_{i:04}"), 1000 + i, START + i / 2),
        );
    }
    let (status, first) = get(&emu, "/v1/balance_transactions?limit=100").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["object"], "list");
    assert_eq!(first["url"], "/v1/balance_transactions");
    assert_eq!(first["has_more"], true);
    let page = ids(&first);
    assert_eq!(page.len(), 100);
    // Newest first; ties in a second by id descending.
    assert_eq!(page[0], "txn_0249");
    assert_eq!(page[1], "txn_0248");
    let mut all = page.clone();
    let mut cursor = page.last().unwrap().clone();
    loop {
        let (_, next) = get(
            &emu,
            &format!("/v1/balance_transactions?limit=100&starting_after={cursor}"),
        )
        .await;
        let p = ids(&next);
        all.extend(p.iter().cloned());
        if next["has_more"] == false {
            break;
        }
        cursor = p.last().unwrap().clone();
    }
    let expected: Vec<String> = (0..250).rev().map(|i| format!("txn_{i:04}")).collect();
    assert_eq!(all, expected, "every transaction once, newest first");
    // Default limit 10; 1..=100 only.
    let (_, d) = get(&emu, "/v1/balance_transactions").await;
    assert_eq!(ids(&d).len(), 10);
    for (limit, message) in [
        ("0", "greater than or equal to 1"),
        ("101", "less than or equal to 100"),
    ] {
        let (status, body) = get(&emu, &format!("/v1/payouts?limit={limit}")).await;
        assert_eq!(status, 400);
        assert_error(&body, None, Some("limit"), message);
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn balance_transaction_filters_type_currency_source_payout_and_created() {
    let emu = start().await;
    let t = |id: &str, amount, fee, cur: &str, ty: &str, src: Option<&str>, at| {
        Emulator::balance_transaction(id, amount, fee, cur, ty, src, at)
    };
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        [
            t("txn_c1", 5000, 175, "usd", "charge", Some("ch_1"), START),
            t(
                "txn_c2",
                2000,
                88,
                "usd",
                "charge",
                Some("ch_2"),
                START + 10,
            ),
            t(
                "txn_r1",
                -2000,
                0,
                "usd",
                "refund",
                Some("re_1"),
                START + 20,
            ),
            t(
                "txn_e1",
                3000,
                117,
                "eur",
                "charge",
                Some("ch_3"),
                START + 30,
            ),
            t(
                "txn_p1",
                -4737,
                0,
                "usd",
                "payout",
                Some("po_1"),
                START + 40,
            ),
            t(
                "txn_f1",
                4737,
                0,
                "usd",
                "payout_failure",
                Some("po_1"),
                START + 50,
            ),
            t("txn_a1", -15, 0, "usd", "adjustment", None, END),
        ],
    );
    // An expanded source filters by its id too.
    let mut expanded = t("txn_x1", 700, 50, "usd", "charge", None, START + 5);
    expanded["source"] = json!({"id": "ch_9", "object": "charge"});
    emu.insert(ObjectKind::BalanceTransaction, expanded);
    emu.pay_out("po_1", &["txn_c1", "txn_c2", "txn_r1"]);

    let list = |q: &'static str| {
        let emu = &emu;
        async move {
            let (status, body) = get(emu, &format!("/v1/balance_transactions?{q}")).await;
            assert_eq!(status, 200, "{q}: {body}");
            ids(&body)
        }
    };
    assert_eq!(
        list("type=charge").await,
        ["txn_e1", "txn_c2", "txn_x1", "txn_c1"]
    );
    assert_eq!(list("type=payout_failure").await, ["txn_f1"]);
    assert_eq!(list("currency=eur").await, ["txn_e1"]);
    assert_eq!(list("currency=EUR").await, ["txn_e1"]);
    assert_eq!(list("source=po_1").await, ["txn_f1", "txn_p1"]);
    assert_eq!(list("source=ch_9").await, ["txn_x1"]);
    assert_eq!(list("payout=po_1").await, ["txn_r1", "txn_c2", "txn_c1"]);
    assert!(list("payout=po_none").await.is_empty());
    // Filters combine with each other, the created range and the cursors.
    assert_eq!(list("payout=po_1&type=charge").await, ["txn_c2", "txn_c1"]);
    assert_eq!(
        list("type=charge&currency=usd&created[gte]=1795842005&created[lt]=1795842030").await,
        ["txn_c2", "txn_x1"]
    );
    let (_, page) = get(&emu, "/v1/balance_transactions?type=charge&limit=2").await;
    assert_eq!(ids(&page), ["txn_e1", "txn_c2"]);
    assert_eq!(page["has_more"], true);
    let (_, page) = get(
        &emu,
        "/v1/balance_transactions?type=charge&limit=2&starting_after=txn_c2",
    )
    .await;
    assert_eq!(ids(&page), ["txn_x1", "txn_c1"]);
    assert_eq!(page["has_more"], false, "no charge after txn_c1");
    // The window's end is exclusive with created[lt], inclusive with [lte].
    assert!(!list("created[gte]=1795842000&created[lt]=1795928400")
        .await
        .contains(&"txn_a1".to_string()));
    assert_eq!(
        list("created[lte]=1795928400&created[gt]=1795842050").await,
        ["txn_a1"]
    );
    // Payout filters are not balance transaction filters, and vice versa.
    for (path, param) in [
        ("/v1/balance_transactions?status=available", "status"),
        (
            "/v1/balance_transactions?arrival_date[gte]=1",
            "arrival_date[gte]",
        ),
        ("/v1/payouts?type=bank_account", "type"),
        ("/v1/payouts?payout=po_1", "payout"),
        ("/v1/charges?currency=usd", "currency"),
    ] {
        let (status, body) = get(&emu, path).await;
        assert_eq!(status, 400, "{path}");
        assert_error(
            &body,
            Some("parameter_unknown"),
            Some(param),
            &format!("Received unknown parameter: {param}"),
        );
    }
    let (status, body) = get(&emu, "/v1/balance_transactions?type=").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        Some("parameter_invalid_empty"),
        Some("type"),
        "empty string",
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn payout_filters_status_destination_and_arrival_date() {
    let emu = start().await;
    let day = 86_400;
    emu.insert_many(
        ObjectKind::Payout,
        [
            Emulator::payout("po_a", 10_000, "usd", "paid", START, START + 2 * day),
            Emulator::payout(
                "po_b",
                20_000,
                "usd",
                "in_transit",
                START + 60,
                START + 3 * day,
            ),
            Emulator::payout(
                "po_c",
                30_000,
                "usd",
                "failed",
                START + 120,
                START + 3 * day,
            ),
            Emulator::payout(
                "po_d",
                40_000,
                "usd",
                "pending",
                START + 180,
                START + 4 * day,
            ),
        ],
    );
    let mut manual = Emulator::payout("po_m", 5_000, "gbp", "paid", START + 240, START + day);
    manual["automatic"] = json!(false);
    manual["destination"] = json!({"id": "ba_manual", "object": "bank_account"});
    emu.insert(ObjectKind::Payout, manual);
    let list = |q: String| {
        let emu = &emu;
        async move {
            let (status, body) = get(emu, &format!("/v1/payouts?{q}")).await;
            assert_eq!(status, 200, "{q}: {body}");
            ids(&body)
        }
    };
    assert_eq!(
        list("".into()).await,
        ["po_m", "po_d", "po_c", "po_b", "po_a"]
    );
    assert_eq!(list("status=failed".into()).await, ["po_c"]);
    assert_eq!(list("status=paid".into()).await, ["po_m", "po_a"]);
    assert_eq!(list("destination=ba_manual".into()).await, ["po_m"]);
    let at3 = START + 3 * day;
    assert_eq!(list(format!("arrival_date={at3}")).await, ["po_c", "po_b"]);
    assert_eq!(
        list(format!(
            "arrival_date[gte]={at3}&arrival_date[lt]={}",
            at3 + day
        ))
        .await,
        ["po_c", "po_b"]
    );
    assert_eq!(
        list(format!("arrival_date[gt]={at3}")).await,
        ["po_d"],
        "gt excludes the bound"
    );
    assert_eq!(
        list(format!("arrival_date[lte]={at3}&status=in_transit")).await,
        ["po_b"]
    );
    assert!(list(format!(
        "arrival_date[gte]={}&arrival_date[lte]={at3}",
        at3 + 1
    ))
    .await
    .is_empty());
    let (status, body) = get(&emu, "/v1/payouts?arrival_date[gte]=tomorrow").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        Some("parameter_invalid_integer"),
        Some("arrival_date[gte]"),
        "Invalid integer: tomorrow",
    );
    // The failed payout carries Stripe's failure fields.
    let (status, po_c) = get(&emu, "/v1/payouts/po_c").await;
    assert_eq!(status, 200);
    assert_eq!(po_c["failure_code"], "account_closed");
    assert!(po_c["failure_balance_transaction"]
        .as_str()
        .unwrap()
        .starts_with("txn_"));
    emu.shutdown().await;
}

#[tokio::test]
async fn retrieves_answer_the_object_or_stripes_404() {
    let emu = start().await;
    emu.insert(
        ObjectKind::BalanceTransaction,
        Emulator::balance_transaction("txn_1", -1500, 0, "usd", "refund", Some("re_1"), START),
    );
    emu.insert(
        ObjectKind::Payout,
        Emulator::payout("po_1", 9_000, "eur", "paid", START, START + 86_400),
    );
    let (status, txn) = get(&emu, "/v1/balance_transactions/txn_1").await;
    assert_eq!(status, 200);
    assert_eq!(txn["object"], "balance_transaction");
    assert_eq!(txn["amount"], -1500);
    assert_eq!(txn["net"], -1500);
    assert_eq!(txn["reporting_category"], "refund");
    let (status, po) = get(&emu, "/v1/payouts/po_1").await;
    assert_eq!(status, 200);
    assert_eq!(po["object"], "payout");
    assert_eq!(po["balance_transaction"], "txn_1", "txn_ + the id's suffix");
    for (path, message) in [
        (
            "/v1/balance_transactions/txn_nope",
            "No such balance_transaction: 'txn_nope'",
        ),
        ("/v1/payouts/po_nope", "No such payout: 'po_nope'"),
        // A payout is not a balance transaction.
        (
            "/v1/balance_transactions/po_1",
            "No such balance_transaction: 'po_1'",
        ),
    ] {
        let (status, body) = get(&emu, path).await;
        assert_eq!(status, 404, "{path}");
        assert_error(&body, Some("resource_missing"), Some("id"), message);
        assert_eq!(
            body["error"]["doc_url"],
            "https://stripe.com/docs/error-codes/resource-missing"
        );
    }
    // An unknown cursor is resource_missing too, naming the cursor.
    let (status, body) = get(&emu, "/v1/payouts?starting_after=po_gone").await;
    assert_eq!(status, 400);
    assert_error(
        &body,
        Some("resource_missing"),
        Some("starting_after"),
        "No such payout: 'po_gone'",
    );
    emu.shutdown().await;
}

// ---------------------------------------------------------------------------
// The source

fn field(name: &str, kind: FieldKind) -> Field {
    Field {
        name: name.into(),
        kind,
        compared: true,
    }
}

/// A fees job's fields: `amount` the money field, `fee` and `net` whole
/// numbers of minor units (one money field per job).
fn txn_schema() -> Schema {
    Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("fee", FieldKind::Integer),
            field("net", FieldKind::Integer),
            field("currency", FieldKind::Currency),
            field("type", FieldKind::Text),
            field("source", FieldKind::Text),
            field("status", FieldKind::Text),
            field("created", FieldKind::Timestamp),
            field("available_on", FieldKind::Timestamp),
            field("reporting_category", FieldKind::Text),
        ],
    }
}

fn source(
    emu: &Emulator,
    object: StripeObject,
    schema: &Schema,
    concurrency: usize,
) -> StripeSource {
    let mut cfg = StripeConfig::new(Secret::new(emu.api_key.clone()), object);
    cfg.base_url = emu.base_url.clone();
    cfg.concurrency = concurrency;
    cfg.requests_per_second = Some(1000);
    cfg.max_attempts = Some(2);
    StripeSource::new(cfg, schema).unwrap()
}

async fn read(s: &StripeSource) -> Vec<Record> {
    let pages: Vec<_> = s.read(window()).try_collect().await.unwrap();
    pages.into_iter().flat_map(|p| p.records).collect()
}

/// One seeded transaction: (amount, fee, net, type).
type Seeded = BTreeMap<String, (i64, i64, i64, &'static str)>;

/// 1,200 transactions over the window, every tenth a refund (negative, no
/// fee) and every 25th a payout (negative) or payout failure (positive),
/// 150 in one second, and four on and beside the window's edges.
fn seed_window(emu: &Emulator) -> Seeded {
    let mut inside = Seeded::new();
    let mut objects = Vec::new();
    let mut add = |id: String, amount: i64, fee: i64, ty: &'static str, created: i64| {
        objects.push(Emulator::balance_transaction(
            &id,
            amount,
            fee,
            "usd",
            ty,
            Some("src_x"),
            created,
        ));
        if (START..END).contains(&created) {
            inside.insert(id, (amount, fee, amount - fee, ty));
        }
    };
    for i in 0..1_200i64 {
        let created = START + i * 86_400 / 1_200;
        let id = format!("txn_{i:05}");
        match i {
            _ if i % 50 == 0 => add(id, -(100_000 + i), 0, "payout", created),
            _ if i % 25 == 0 => add(id, 100_000 + i, 0, "payout_failure", created),
            _ if i % 10 == 0 => add(id, -(500 + i), 0, "refund", created),
            _ => add(id, 1000 + i, (1000 + i) * 29 / 1000 + 30, "charge", created),
        }
    }
    for i in 0..150 {
        add(
            format!("txn_same_{i:03}"),
            2500,
            103,
            "charge",
            START + 40_000,
        );
    }
    add("txn_at_start".into(), -1, 0, "adjustment", START);
    add("txn_last_second".into(), 7, 30, "charge", END - 1);
    add("txn_at_end".into(), 999, 59, "charge", END);
    add("txn_before".into(), 999, 59, "charge", START - 1);
    emu.insert_many(ObjectKind::BalanceTransaction, objects);
    inside
}

fn usd() -> Currency {
    Currency::parse("USD").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reads_a_window_of_balance_transactions_exactly() {
    let emu = start().await;
    let inside = seed_window(&emu);
    assert!(inside.contains_key("txn_at_start") && inside.contains_key("txn_last_second"));
    assert!(!inside.contains_key("txn_at_end") && !inside.contains_key("txn_before"));
    let schema = txn_schema();
    for concurrency in [1, 8] {
        let records = read(&source(
            &emu,
            StripeObject::BalanceTransactions,
            &schema,
            concurrency,
        ))
        .await;
        let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys.len(), records.len(), "no duplicates ({concurrency})");
        assert_eq!(
            keys,
            inside.keys().map(String::as_str).collect(),
            "exactly the window ({concurrency})"
        );
        let (mut amounts, mut fees, mut nets) = (0i64, 0i64, 0i64);
        for r in &records {
            let (amount, fee, net, ty) = inside[&r.key];
            assert_eq!(
                r.values[0],
                Value::Money(Money::from_minor(amount, usd())),
                "{}",
                r.key
            );
            assert_eq!(r.values[1], Value::Integer(fee), "{}", r.key);
            assert_eq!(r.values[2], Value::Integer(net), "{}", r.key);
            assert_eq!(r.values[3], Value::Currency(usd()));
            assert_eq!(r.values[4], Value::Text(ty.into()));
            assert_eq!(r.values[5], Value::Text("src_x".into()));
            assert_eq!(r.values[6], Value::Text("available".into()));
            let Value::Timestamp(created) = r.values[7] else {
                panic!("{:?}", r.values[7])
            };
            let Value::Timestamp(available) = r.values[8] else {
                panic!("{:?}", r.values[8])
            };
            assert_eq!(available.as_second() - created.as_second(), 2 * 86_400);
            amounts += amount;
            fees += fee;
            nets += net;
        }
        let expected: (i64, i64, i64) = inside
            .values()
            .fold((0, 0, 0), |(a, f, n), v| (a + v.0, f + v.1, n + v.2));
        assert_eq!((amounts, fees, nets), expected);
        assert_eq!(amounts - fees, nets);
        // Negative ones among them, read exactly.
        let refund = records.iter().find(|r| r.key == "txn_00010").unwrap();
        assert_eq!(
            refund.values[0],
            Value::Money(Money::from_minor(-510, usd()))
        );
        assert_eq!(refund.values[0].to_string(), "-5.10");
        assert_eq!(refund.values[2], Value::Integer(-510));
        let payout = records.iter().find(|r| r.key == "txn_00050").unwrap();
        assert_eq!(payout.values[0].to_string(), "-1000.50");
        assert_eq!(payout.values[9], Value::Text("payout".into()));
        let failure = records.iter().find(|r| r.key == "txn_00025").unwrap();
        assert_eq!(failure.values[0].to_string(), "1000.25");
        assert_eq!(failure.values[9], Value::Text("payout_reversal".into()));
    }
    // The source asked the balance transactions list, paged by cursor,
    // always within the window's created range.
    let lists: Vec<_> = emu
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/balance_transactions")
        .collect();
    assert!(
        lists.len() >= 13,
        "{} list calls for 1,353 objects",
        lists.len()
    );
    assert!(lists
        .iter()
        .any(|r| r.query.iter().any(|(k, _)| k == "starting_after")));
    for r in &lists {
        let q: BTreeMap<&str, &str> = r
            .query
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(q["limit"], "100");
        assert!(q["created[gte]"].parse::<i64>().unwrap() >= START, "{q:?}");
        assert!(q["created[lt]"].parse::<i64>().unwrap() <= END, "{q:?}");
    }
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_find_balance_transactions_and_payouts_by_id_and_404_is_missing() {
    let emu = start().await;
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        [
            Emulator::balance_transaction(
                "txn_ok",
                10_000,
                320,
                "eur",
                "charge",
                Some("ch_ok"),
                START - 86_400 * 40,
            ),
            Emulator::balance_transaction(
                "txn_neg",
                -10_000,
                -320,
                "eur",
                "refund",
                Some("re_1"),
                START,
            ),
        ],
    );
    let schema = txn_schema();
    let s = source(&emu, StripeObject::BalanceTransactions, &schema, 4);
    let keys: Vec<String> = ["txn_ok", "txn_missing", "txn_neg"]
        .map(String::from)
        .to_vec();
    let mut found = s.lookup(&keys).await.unwrap();
    found.sort_by(|a, b| a.key.cmp(&b.key));
    let eur = Currency::parse("EUR").unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].key, "txn_neg");
    assert_eq!(
        found[0].values[0],
        Value::Money(Money::from_minor(-10_000, eur))
    );
    assert_eq!(
        found[0].values[1],
        Value::Integer(-320),
        "a refunded fee is negative"
    );
    assert_eq!(found[0].values[2], Value::Integer(-9_680));
    assert_eq!(found[1].key, "txn_ok");
    assert_eq!(found[1].values[2], Value::Integer(9_680));
    let paths: BTreeSet<String> = emu.requests().into_iter().map(|r| r.path).collect();
    assert!(
        paths.contains("/v1/balance_transactions/txn_missing"),
        "{paths:?}"
    );

    // Payouts: their own path, `automatic` as text, the balance transaction's id.
    emu.insert(
        ObjectKind::Payout,
        Emulator::payout("po_1", 9_680, "eur", "paid", START + 100, START + 86_400),
    );
    let schema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("currency", FieldKind::Currency),
            field("status", FieldKind::Text),
            field("arrival_date", FieldKind::Timestamp),
            field("created", FieldKind::Timestamp),
            field("method", FieldKind::Text),
            field("type", FieldKind::Text),
            field("automatic", FieldKind::Text),
            field("balance_transaction", FieldKind::Text),
        ],
    };
    let s = source(&emu, StripeObject::Payouts, &schema, 4);
    let found = s.lookup(&["po_1".into(), "po_2".into()]).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].values,
        vec![
            Value::Money(Money::from_minor(9_680, eur)),
            Value::Currency(eur),
            Value::Text("paid".into()),
            Value::Timestamp(jiff::Timestamp::from_second(START + 86_400).unwrap()),
            Value::Timestamp(jiff::Timestamp::from_second(START + 100).unwrap()),
            Value::Text("standard".into()),
            Value::Text("bank_account".into()),
            Value::Text("true".into()),
            Value::Text("txn_1".into()),
        ]
    );
    let read = read(&s).await;
    assert_eq!(read.len(), 1);
    assert_eq!(read[0], found[0]);
    assert!(emu.requests().iter().any(|r| r.path == "/v1/payouts/po_2"));
    emu.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reads_payouts_of_a_window_by_created_across_pages() {
    let emu = start().await;
    let mut inside = BTreeSet::new();
    let mut objects = Vec::new();
    for i in 0..260i64 {
        let created = START - 3_600 + i * 400;
        let status = ["paid", "failed", "in_transit", "pending", "canceled"][(i % 5) as usize];
        let id = format!("po_{i:04}");
        objects.push(Emulator::payout(
            &id,
            50_000 + i,
            "usd",
            status,
            created,
            created + 2 * 86_400,
        ));
        if (START..END).contains(&created) {
            inside.insert(id);
        }
    }
    emu.insert_many(ObjectKind::Payout, objects);
    let schema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("status", FieldKind::Text),
            field("created", FieldKind::Timestamp),
        ],
    };
    let records = read(&source(&emu, StripeObject::Payouts, &schema, 4)).await;
    let keys: BTreeSet<String> = records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(keys.len(), records.len());
    assert_eq!(keys, inside);
    assert_eq!(inside.len(), 216);
    let failed = records.iter().find(|r| r.key == "po_0011").unwrap();
    assert_eq!(failed.values[1], Value::Text("failed".into()));
    assert_eq!(failed.values[0].to_string(), "500.11");
    emu.shutdown().await;
}

fn filtered(
    emu: &Emulator,
    object: StripeObject,
    schema: &Schema,
    filters: &[(&str, &str)],
) -> StripeSource {
    let mut cfg = StripeConfig::new(Secret::new(emu.api_key.clone()), object);
    cfg.base_url = emu.base_url.clone();
    cfg.requests_per_second = Some(1000);
    cfg.max_attempts = Some(2);
    cfg.filters = filters
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    StripeSource::new(cfg, schema).unwrap()
}

fn keys(records: &[Record]) -> BTreeSet<String> {
    records.iter().map(|r| r.key.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_narrow_the_read_and_the_lookups_alike() {
    let emu = start().await;
    let t = Emulator::balance_transaction;
    emu.insert_many(
        ObjectKind::BalanceTransaction,
        [
            // Paid out by po_1: two in the window, one from the day before.
            t(
                "txn_c1",
                5000,
                175,
                "usd",
                "charge",
                Some("ch_1"),
                START + 10,
            ),
            t(
                "txn_r1",
                -2000,
                0,
                "usd",
                "refund",
                Some("re_1"),
                START + 20,
            ),
            t(
                "txn_old",
                800,
                53,
                "usd",
                "charge",
                Some("ch_0"),
                START - 3_600,
            ),
            // Not paid out.
            t(
                "txn_c2",
                3000,
                117,
                "eur",
                "charge",
                Some("ch_2"),
                START + 30,
            ),
            t(
                "txn_p1",
                -3747,
                0,
                "usd",
                "payout",
                Some("po_1"),
                START + 40,
            ),
        ],
    );
    emu.pay_out("po_1", &["txn_c1", "txn_r1", "txn_old"]);
    let schema = txn_schema();
    let all: Vec<String> = [
        "txn_c1", "txn_r1", "txn_old", "txn_c2", "txn_p1", "txn_none",
    ]
    .map(String::from)
    .to_vec();
    let lookup = |s: StripeSource| {
        let all = all.clone();
        async move { keys(&s.lookup(&all).await.unwrap()) }
    };
    let set = |ids: &[&str]| ids.iter().map(|i| i.to_string()).collect::<BTreeSet<_>>();

    // `type`: Stripe filters the list; lookups judge the object.
    let s = filtered(
        &emu,
        StripeObject::BalanceTransactions,
        &schema,
        &[("type", "charge")],
    );
    assert_eq!(keys(&read(&s).await), set(&["txn_c1", "txn_c2"]));
    assert_eq!(lookup(s).await, set(&["txn_c1", "txn_c2", "txn_old"]));
    // `currency` in any case, with `type`.
    let s = filtered(
        &emu,
        StripeObject::BalanceTransactions,
        &schema,
        &[("currency", "EUR"), ("type", "charge")],
    );
    assert_eq!(keys(&read(&s).await), set(&["txn_c2"]));
    assert_eq!(lookup(s).await, set(&["txn_c2"]));
    // `payout`: a transaction does not name its payout, so lookups search
    // the payout's list (all of it: txn_old is outside the window).
    let before = emu.requests().len();
    let s = filtered(
        &emu,
        StripeObject::BalanceTransactions,
        &schema,
        &[("payout", "po_1")],
    );
    assert_eq!(keys(&read(&s).await), set(&["txn_c1", "txn_r1"]));
    let found = s.lookup(&all).await.unwrap();
    assert_eq!(keys(&found), set(&["txn_c1", "txn_r1", "txn_old"]));
    let old = found.iter().find(|r| r.key == "txn_old").unwrap();
    assert_eq!(old.values[1], Value::Integer(53));
    assert_eq!(old.values[2], Value::Integer(747));
    // Listed once, however many lookups follow; never retrieved one by one.
    s.lookup(&all).await.unwrap();
    let asked: Vec<_> = emu.requests().into_iter().skip(before).collect();
    let listed_whole = asked
        .iter()
        .filter(|r| r.query.iter().all(|(k, _)| !k.starts_with("created")))
        .count();
    assert_eq!(listed_whole, 1, "{asked:#?}");
    assert!(asked.iter().all(|r| r.path == "/v1/balance_transactions"));
    assert!(asked
        .iter()
        .all(|r| r.query.contains(&("payout".into(), "po_1".into()))));
    // `source`, the same way.
    let s = filtered(
        &emu,
        StripeObject::BalanceTransactions,
        &schema,
        &[("source", "po_1")],
    );
    assert_eq!(keys(&read(&s).await), set(&["txn_p1"]));
    assert_eq!(lookup(s).await, set(&["txn_p1"]));

    // Payouts by `status` (and `destination`).
    emu.insert_many(
        ObjectKind::Payout,
        [
            Emulator::payout("po_paid", 4_000, "usd", "paid", START + 50, START + 86_400),
            Emulator::payout(
                "po_failed",
                4_000,
                "usd",
                "failed",
                START + 60,
                START + 86_400,
            ),
        ],
    );
    let destination = Emulator::payout("po_paid", 0, "usd", "paid", 0, 0)["destination"]
        .as_str()
        .unwrap()
        .to_owned();
    let pschema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("status", FieldKind::Text),
        ],
    };
    let s = filtered(
        &emu,
        StripeObject::Payouts,
        &pschema,
        &[("status", "failed")],
    );
    assert_eq!(keys(&read(&s).await), set(&["po_failed"]));
    let found = s
        .lookup(&["po_paid".into(), "po_failed".into()])
        .await
        .unwrap();
    assert_eq!(keys(&found), set(&["po_failed"]));
    let s = filtered(
        &emu,
        StripeObject::Payouts,
        &pschema,
        &[("destination", destination.as_str()), ("status", "paid")],
    );
    assert_eq!(keys(&read(&s).await), set(&["po_paid"]));
    emu.shutdown().await;
}

#[test]
fn filters_an_endpoint_does_not_take_are_refused_naming_the_setting() {
    let build = |object, filters: &[(&str, &str)]| {
        let mut cfg = StripeConfig::new(Secret::new("sk_test_x"), object);
        cfg.filters = filters
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StripeSource::new(cfg, &txn_schema())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = build(StripeObject::Payouts, &[("type", "bank_account")]);
    assert!(
        e.contains("source.filters.type")
            && e.contains("/v1/payouts")
            && e.contains("use one of: status, destination"),
        "{e}"
    );
    let e = build(
        StripeObject::BalanceTransactions,
        &[("status", "available")],
    );
    assert!(
        e.contains("use one of: type, currency, source, payout"),
        "{e}"
    );
    let e = build(StripeObject::Charges, &[("customer", "cus_1")]);
    assert!(e.contains("takes none here; remove source.filters"), "{e}");
    let e = build(StripeObject::BalanceTransactions, &[("payout", " ")]);
    assert!(
        e.contains("source.filters.payout is empty") && e.contains("po_"),
        "{e}"
    );
    let e = build(
        StripeObject::BalanceTransactions,
        &[("type", "charge"), ("type", "refund")],
    );
    assert!(e.contains("source.filters.type is given twice"), "{e}");
}

/// A Stripe source windows by `created`; a job windowed on another field
/// (a payout's `arrival_date`) is refused with the fix, one mapped onto
/// `created` is not.
#[test]
fn a_time_field_other_than_created_is_refused_naming_the_fix() {
    use recon_core::BuildContext;
    use recon_stripe::StripeSettings;
    let settings = |fields: &[(&str, &str)]| StripeSettings {
        api_key: Secret::new("sk_test_x"),
        object: StripeObject::Payouts,
        base_url: None,
        api_version: None,
        requests_per_second: None,
        concurrency: None,
        rate_limit_patience: None,
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        filters: Default::default(),
    };
    let schema = Schema {
        fields: vec![
            field("amount", FieldKind::Money),
            field("arrival_date", FieldKind::Timestamp),
            field("created", FieldKind::Timestamp),
            field("booked", FieldKind::Timestamp),
        ],
    };
    let cx = |i| BuildContext {
        schema: &schema,
        time_field: Some(i),
        job: "fees",
        tokens: None,
    };
    let e = settings(&[]).client_config(cx(1)).unwrap_err().to_string();
    assert!(
        e.contains("`arrival_date`")
            && e.contains("by `created`")
            && e.contains("time_field = \"created\""),
        "{e}"
    );
    assert!(settings(&[]).client_config(cx(2)).is_ok());
    assert!(settings(&[("booked", "created")])
        .client_config(cx(3))
        .is_ok());
    let e = settings(&[("booked", "arrival_date")])
        .client_config(cx(3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`booked` reads Stripe's `arrival_date`"), "{e}");
}
