//! Shopify amounts are decimal strings in major units
//! (`totalPriceSet.shopMoney.amount`, a `Decimal` scalar), so ISO 4217's
//! exponents apply as they are; the currencies whose API minor units differ
//! at Stripe (ISK, MGA) or are special there (HUF, TWD, UGX) are read here
//! exactly by their ISO exponent. Through the GraphQL emulator over HTTP.

use std::time::Duration;

use futures_util::TryStreamExt;
use recon_core::{
    Currency, Field, FieldKind, Money, Record, Schema, Secret, Source, Value, Window,
};
use recon_shopify::emulator::{Emulator, EmulatorConfig, OrderSpec};
use recon_shopify::{BulkMode, ShopifyConfig, ShopifySource};

const START: i64 = 1_795_842_000;

fn ts(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(s).unwrap()
}

fn schema() -> Schema {
    Schema {
        fields: vec![Field {
            name: "amount".into(),
            kind: FieldKind::Money,
            compared: true,
        }],
    }
}

fn order(id: u64, amount: &str, currency: &str) -> OrderSpec {
    OrderSpec {
        legacy_id: id,
        name: format!("#{}", 1000 + id),
        created_at: ts(START + id as i64),
        updated_at: ts(START + id as i64 + 60),
        amount: amount.into(),
        currency: currency.into(),
        financial_status: "PAID".into(),
        email: None,
    }
}

async fn read(e: &Emulator) -> Result<Vec<Record>, recon_core::ConnectorError> {
    let mut cfg = ShopifyConfig::new(&e.base_url, Secret::new(e.token.clone()));
    cfg.bulk = BulkMode::Never;
    cfg.bulk_poll = Duration::from_millis(100);
    let s = ShopifySource::new(cfg, &schema()).unwrap();
    let window = Window {
        start: ts(START),
        end: ts(START + 86_400),
    };
    let pages: Vec<_> = s.read(window).try_collect().await?;
    let mut v: Vec<Record> = pages.into_iter().flat_map(|p| p.records).collect();
    v.sort_by_key(|r| r.key.parse::<u64>().unwrap());
    Ok(v)
}

/// (currency, Shopify amount text, ISO 4217 minor units).
const CASES: &[(&str, &str, i64)] = &[
    ("ISK", "100", 100),
    ("ISK", "100.0", 100),
    ("MGA", "500.00", 50000),
    ("HUF", "123.45", 12345),
    ("TWD", "99.00", 9900),
    ("UGX", "5000", 5000),
    ("JPY", "500", 500),
    ("KWD", "1.230", 1230),
    ("USD", "29.99", 2999),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decimal_amounts_use_iso_4217_exponents_exactly() {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    for (i, (cur, amount, _)) in CASES.iter().enumerate() {
        e.insert_order(order(i as u64 + 1, amount, cur));
    }
    let records = read(&e).await.unwrap();
    assert_eq!(records.len(), CASES.len());
    for (r, (cur, amount, minor)) in records.iter().zip(CASES) {
        assert_eq!(
            r.values[0],
            Value::Money(Money::from_minor(*minor, Currency::parse(cur).unwrap())),
            "{cur} {amount}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amount_finer_than_the_currency_is_an_error_naming_order_and_field() {
    for (cur, amount) in [
        ("ISK", "100.50"),
        ("JPY", "500.5"),
        ("USD", "29.990000000000002"),
    ] {
        let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
        e.insert_order(order(7, amount, cur));
        let err = read(&e).await.unwrap_err().to_string();
        assert!(
            err.contains("Shopify order #1007")
                && err.contains("totalPriceSet.shopMoney.amount")
                && err.contains(&format!("`{amount}` has more decimal places than {cur}")),
            "{err}"
        );
    }
}
