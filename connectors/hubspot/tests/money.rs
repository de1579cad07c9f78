//! HubSpot amounts are decimal strings in major units (the `amount`
//! property of deals), so ISO 4217's exponents apply as they are; the
//! currencies whose API minor units differ at Stripe (ISK, MGA) or are
//! special there (HUF, TWD, UGX) are read here exactly by their ISO
//! exponent. Through the emulator over HTTP.

use recon_core::{Currency, Field, FieldKind, Money, Schema, Secret, Source, Value};
use recon_hubspot::emulator::{Emulator, EmulatorConfig, PropertyType};
use recon_hubspot::{HubSpotConfig, HubSpotObjects};
use serde_json::json;

fn schema() -> Schema {
    Schema {
        fields: vec![Field {
            name: "amount".into(),
            kind: FieldKind::Money,
            compared: true,
        }],
    }
}

async fn emulator() -> Emulator {
    let e = Emulator::start(EmulatorConfig::default()).await.unwrap();
    e.create_property("deals", "stripe_charge_id", true);
    e.create_property("deals", "deal_currency_code", false);
    e.create_typed_property("deals", "amount", PropertyType::Number, false);
    e
}

fn objects(e: &Emulator) -> HubSpotObjects {
    let mut cfg = HubSpotConfig::new(
        Secret::new(e.token.clone()),
        "deals",
        "stripe_charge_id",
        vec!["amount".into()],
    );
    cfg.currency_property = Some("deal_currency_code".into());
    cfg.base_url = e.base_url.clone();
    HubSpotObjects::new(cfg, &schema()).unwrap()
}

fn deal(e: &Emulator, key: &str, amount: &str, currency: &str) {
    let mut p = serde_json::Map::new();
    p.insert("stripe_charge_id".into(), json!(key));
    p.insert("amount".into(), json!(amount));
    p.insert("deal_currency_code".into(), json!(currency));
    e.insert("deals", p);
}

/// (currency, HubSpot amount text, ISO 4217 minor units).
const CASES: &[(&str, &str, i64)] = &[
    ("ISK", "100", 100),
    ("MGA", "500.00", 50000),
    ("MGA", "500", 50000),
    ("HUF", "123.45", 12345),
    ("TWD", "99", 9900),
    ("UGX", "5000", 5000),
    ("JPY", "500", 500),
    ("KWD", "1.23", 1230),
    ("USD", "29.99", 2999),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decimal_amounts_use_iso_4217_exponents_exactly() {
    let e = emulator().await;
    let keys: Vec<String> = (0..CASES.len()).map(|i| format!("ch_{i}")).collect();
    for (key, (cur, amount, _)) in keys.iter().zip(CASES) {
        deal(&e, key, amount, cur);
    }
    let mut found = objects(&e).lookup(&keys).await.unwrap();
    found.sort_by_key(|r| r.key[3..].parse::<usize>().unwrap());
    assert_eq!(found.len(), CASES.len());
    for (r, (cur, amount, minor)) in found.iter().zip(CASES) {
        assert_eq!(
            r.values[0],
            Value::Money(Money::from_minor(*minor, Currency::parse(cur).unwrap())),
            "{cur} {amount}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amount_finer_than_the_currency_is_an_error_naming_object_and_property() {
    for (cur, amount) in [
        ("ISK", "100.5"),
        ("JPY", "500.5"),
        ("USD", "29.990000000000002"),
    ] {
        let e = emulator().await;
        deal(&e, "ch_fine", amount, cur);
        let err = objects(&e)
            .lookup(&["ch_fine".to_string()])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HubSpot deals")
                && err.contains("ch_fine")
                && err.contains("property `amount`")
                && err.contains(&format!("`{amount}` has more decimal places than {cur}")),
            "{err}"
        );
    }
}
