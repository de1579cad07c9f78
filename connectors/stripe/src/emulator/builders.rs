//! Builders of realistic Stripe objects, shaped after the object definitions in
//! Stripe's API reference (the Charge, PaymentIntent, Refund, Customer,
//! Invoice, BalanceTransaction and Payout objects; the last two carry every
//! property of Stripe's OpenAPI schema, checked by `tests/spec.rs`). Fields the builders' arguments do not determine are
//! filled deterministically from the object's id (so the same id always yields
//! the same object): the customer, the payer's name and email, card details.
//! The result is a plain `serde_json::Value`; callers may change any field
//! before inserting it.

use std::sync::OnceLock;

use serde_json::{json, Value};

use recon_emulator_kit::{fnv1a64, splitmix64};

use super::server::push_base62;

/// FNV-1a, then mixed: a stable hash of an id.
fn hash(s: &str) -> u64 {
    splitmix64(fnv1a64(s.as_bytes()))
}

/// `prefix` + 14 base62 characters derived from `seed`.
fn derived_id(prefix: &str, seed: u64) -> String {
    let mut s = String::with_capacity(prefix.len() + 24);
    s.push_str(prefix);
    push_base62(&mut s, splitmix64(seed), 11);
    push_base62(&mut s, splitmix64(seed ^ 0x5bd1_e995), 3);
    s
}

/// The part of a Stripe id after its type prefix (`ch_`, `pi_`, ...). Stripe
/// gives a charge and the PaymentIntent that created it the same suffix
/// (`pi_3Mml…` → `ch_3Mml…`), and the emulator's builders do the same.
fn suffix(id: &str) -> &str {
    id.split_once('_').map_or(id, |(_, s)| s)
}

const FIRST: [&str; 12] = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Dennis",
    "Margaret", "John",
];
const LAST: [&str; 12] = [
    "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Perlman",
    "Ritchie", "Hamilton", "Backus",
];

/// A customer id from a pool of 1,000, so charges share customers. Derived from
/// the id's suffix, so a charge and its PaymentIntent have the same customer.
pub(crate) fn customer_for(id: &str) -> String {
    derived_id("cus_", hash(suffix(id)) % 1000)
}

/// A stable (name, email) for a customer id.
pub(crate) fn person_for(customer: &str) -> (String, String) {
    let h = hash(customer);
    let first = FIRST[(h % 12) as usize];
    let last = LAST[((h / 12) % 12) as usize];
    let n = (h / 144) % 1000;
    (
        format!("{first} {last}"),
        format!(
            "{}.{}{}@example.com",
            first.to_lowercase(),
            last.to_lowercase(),
            n
        ),
    )
}

const BRANDS: [(&str, &str); 4] = [
    ("visa", "4242"),
    ("mastercard", "4444"),
    ("amex", "8431"),
    ("visa", "1881"),
];

/// The parts of a charge that do not vary, built once: the debug-build cost of
/// `json!` for ~80 fields dominated bulk loads of 200,000 charges, and cloning
/// a ready `Value` and patching the varying fields is several times cheaper.
fn charge_template() -> &'static Value {
    static TEMPLATE: OnceLock<Value> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let head = json!({
            "id": "",
            "object": "charge",
            "amount": 0,
            "amount_captured": 0,
            "amount_refunded": 0,
            "application": null,
            "application_fee": null,
            "application_fee_amount": null,
            "balance_transaction": null,
            "billing_details": {
                "address": {
                    "city": null,
                    "country": "US",
                    "line1": null,
                    "line2": null,
                    "postal_code": null,
                    "state": null
                },
                "email": null,
                "name": null,
                "phone": null
            },
            "calculated_statement_descriptor": "RECON EMULATOR",
            "captured": true,
            "created": 0,
            "currency": "usd",
            "customer": null,
            "description": null,
            "disputed": false,
            "failure_balance_transaction": null,
            "failure_code": null,
            "failure_message": null,
            "fraud_details": {},
            "livemode": false,
            "metadata": {},
            "on_behalf_of": null
        });
        let rest = json!({
            "outcome": {
                "advice_code": null,
                "network_advice_code": null,
                "network_decline_code": null,
                "network_status": "approved_by_network",
                "reason": null,
                "risk_level": "normal",
                "risk_score": 0,
                "seller_message": "Payment complete.",
                "type": "authorized"
            },
            "paid": true,
            "payment_intent": null,
            "payment_method": null,
            "payment_method_details": {
                "card": {
                    "amount_authorized": null,
                    "brand": "visa",
                    "checks": {
                        "address_line1_check": null,
                        "address_postal_code_check": "pass",
                        "cvc_check": "pass"
                    },
                    "country": "US",
                    "exp_month": 1,
                    "exp_year": 2030,
                    "fingerprint": null,
                    "funding": "credit",
                    "installments": null,
                    "last4": "4242",
                    "mandate": null,
                    "network": "visa",
                    "three_d_secure": null,
                    "wallet": null
                },
                "type": "card"
            },
            "radar_options": {},
            "receipt_email": null,
            "receipt_number": null,
            "receipt_url": null,
            "refunded": false,
            "review": null,
            "shipping": null,
            "source_transfer": null,
            "statement_descriptor": null,
            "statement_descriptor_suffix": null,
            "status": "succeeded",
            "transfer_data": null,
            "transfer_group": null
        });
        merge(head, rest)
    })
}

/// Sets `obj[path[0]][path[1]]...` (all but the last must already exist).
fn set(obj: &mut Value, path: &[&str], value: impl Into<Value>) {
    let mut at = obj;
    for key in path {
        at = &mut at[*key];
    }
    *at = value.into();
}

pub(crate) fn charge(id: &str, amount: i64, currency: &str, status: &str, created: i64) -> Value {
    let h = hash(id);
    let customer = customer_for(id);
    let (name, email) = person_for(&customer);
    let (brand, last4) = BRANDS[(h % 4) as usize];
    let succeeded = status == "succeeded";
    let failed = status == "failed";
    let sfx = suffix(id);

    let mut c = charge_template().clone();
    set(&mut c, &["id"], id);
    set(&mut c, &["amount"], amount);
    set(
        &mut c,
        &["amount_captured"],
        if failed { 0 } else { amount },
    );
    if !failed {
        set(&mut c, &["balance_transaction"], format!("txn_{sfx}"));
    }
    set(
        &mut c,
        &["billing_details", "address", "postal_code"],
        format!("{:05}", h % 100_000),
    );
    set(&mut c, &["billing_details", "email"], email.clone());
    set(&mut c, &["billing_details", "name"], name);
    set(&mut c, &["captured"], !failed);
    set(&mut c, &["created"], created);
    set(&mut c, &["currency"], currency.to_ascii_lowercase());
    set(&mut c, &["customer"], customer);
    set(
        &mut c,
        &["description"],
        format!("Payment for order #{}", 10_000 + h % 90_000),
    );
    if failed {
        set(&mut c, &["failure_code"], "card_declined");
        set(&mut c, &["failure_message"], "Your card was declined.");
        set(
            &mut c,
            &["outcome", "network_status"],
            "declined_by_network",
        );
        set(&mut c, &["outcome", "reason"], "generic_decline");
        set(
            &mut c,
            &["outcome", "seller_message"],
            "The bank did not return any further details with this decline.",
        );
        set(&mut c, &["outcome", "type"], "issuer_declined");
    } else {
        set(
            &mut c,
            &["payment_method_details", "card", "amount_authorized"],
            amount,
        );
    }
    set(&mut c, &["outcome", "risk_score"], h % 70);
    set(&mut c, &["paid"], succeeded);
    set(&mut c, &["payment_intent"], format!("pi_{sfx}"));
    set(&mut c, &["payment_method"], derived_id("pm_", h));
    set(&mut c, &["payment_method_details", "card", "brand"], brand);
    set(
        &mut c,
        &["payment_method_details", "card", "exp_month"],
        1 + h % 12,
    );
    set(
        &mut c,
        &["payment_method_details", "card", "exp_year"],
        2030 + (h / 12) % 5,
    );
    set(
        &mut c,
        &["payment_method_details", "card", "fingerprint"],
        derived_id("", h ^ 0xf1),
    );
    set(&mut c, &["payment_method_details", "card", "last4"], last4);
    set(
        &mut c,
        &["payment_method_details", "card", "network"],
        brand,
    );
    set(&mut c, &["receipt_email"], email);
    set(
        &mut c,
        &["receipt_url"],
        format!("https://pay.stripe.com/receipts/payment/{sfx}"),
    );
    set(&mut c, &["status"], status);
    c
}

pub(crate) fn payment_intent(
    id: &str,
    amount: i64,
    currency: &str,
    status: &str,
    created: i64,
) -> Value {
    let h = hash(id);
    let sfx = suffix(id);
    let customer = customer_for(id);
    let (_, email) = person_for(&customer);
    let canceled = status == "canceled";
    let succeeded = status == "succeeded";
    let charged = matches!(status, "succeeded" | "processing" | "requires_capture");
    json!({
        "id": id,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": if status == "requires_capture" { amount } else { 0 },
        "amount_details": { "tip": {} },
        "amount_received": if succeeded { amount } else { 0 },
        "application": null,
        "application_fee_amount": null,
        "automatic_payment_methods": { "allow_redirects": "always", "enabled": true },
        "canceled_at": if canceled { json!(created + 60) } else { Value::Null },
        "cancellation_reason": if canceled { json!("requested_by_customer") } else { Value::Null },
        "capture_method": "automatic_async",
        "client_secret": format!("{id}_secret_{}", derived_id("", h)),
        "confirmation_method": "automatic",
        "created": created,
        "currency": currency.to_ascii_lowercase(),
        "customer": customer,
        "description": format!("Payment for order #{}", 10_000 + h % 90_000),
        "last_payment_error": null,
        "latest_charge": if charged { json!(format!("ch_{sfx}")) } else { Value::Null },
        "livemode": false,
        "metadata": {},
        "next_action": null,
        "on_behalf_of": null,
        "payment_method": if charged { json!(derived_id("pm_", h)) } else { Value::Null },
        "payment_method_configuration_details": null,
        "payment_method_options": {
            "card": {
                "installments": null,
                "mandate_options": null,
                "network": null,
                "request_three_d_secure": "automatic"
            }
        },
        "payment_method_types": ["card"],
        "processing": null,
        "receipt_email": email,
        "review": null,
        "setup_future_usage": null,
        "shipping": null,
        "source": null,
        "statement_descriptor": null,
        "statement_descriptor_suffix": null,
        "status": status,
        "transfer_data": null,
        "transfer_group": null
    })
}

pub(crate) fn refund(
    id: &str,
    charge: &str,
    amount: i64,
    currency: &str,
    status: &str,
    created: i64,
) -> Value {
    json!({
        "id": id,
        "object": "refund",
        "amount": amount,
        "balance_transaction": if status == "failed" { Value::Null } else { json!(format!("txn_{}", suffix(id))) },
        "charge": charge,
        "created": created,
        "currency": currency.to_ascii_lowercase(),
        "destination_details": {
            "card": { "reference_status": "pending", "reference_type": "acquirer_reference_number", "type": "refund" },
            "type": "card"
        },
        "metadata": {},
        "payment_intent": format!("pi_{}", suffix(charge)),
        "reason": "requested_by_customer",
        "receipt_number": null,
        "source_transfer_reversal": null,
        "status": status,
        "transfer_reversal": null
    })
}

pub(crate) fn customer(id: &str, email: &str, name: &str, created: i64) -> Value {
    let h = hash(id);
    let mut prefix = String::new();
    for i in 0..8 {
        prefix.push(b"0123456789ABCDEF"[((h >> (i * 4)) & 0xf) as usize] as char);
    }
    json!({
        "id": id,
        "object": "customer",
        "address": null,
        "balance": 0,
        "created": created,
        "currency": null,
        "default_source": null,
        "delinquent": false,
        "description": null,
        "discount": null,
        "email": email,
        "invoice_prefix": prefix,
        "invoice_settings": {
            "custom_fields": null,
            "default_payment_method": null,
            "footer": null,
            "rendering_options": null
        },
        "livemode": false,
        "metadata": {},
        "name": name,
        "next_invoice_sequence": 1,
        "phone": null,
        "preferred_locales": [],
        "shipping": null,
        "tax_exempt": "none",
        "test_clock": null
    })
}

pub(crate) fn invoice(
    id: &str,
    customer: &str,
    amount_due: i64,
    currency: &str,
    status: &str,
    created: i64,
) -> Value {
    let h = hash(id);
    let (name, email) = person_for(customer);
    let paid = status == "paid";
    let draft = status == "draft";
    let amount_paid = if paid { amount_due } else { 0 };
    let finalized_at = if draft {
        Value::Null
    } else {
        json!(created + 3600)
    };
    let head = json!({
        "id": id,
        "object": "invoice",
        "account_country": "US",
        "account_name": "Recon Emulator",
        "account_tax_ids": null,
        "amount_due": amount_due,
        "amount_overpaid": 0,
        "amount_paid": amount_paid,
        "amount_remaining": amount_due - amount_paid,
        "amount_shipping": 0,
        "application": null,
        "attempt_count": if paid { 1 } else { 0 },
        "attempted": paid,
        "auto_advance": !paid && !draft,
        "automatic_tax": { "disabled_reason": null, "enabled": false, "liability": null, "status": null },
        "billing_reason": "manual",
        "collection_method": "charge_automatically",
        "created": created,
        "currency": currency.to_ascii_lowercase(),
        "custom_fields": null,
        "customer": customer,
        "customer_address": null,
        "customer_email": email,
        "customer_name": name,
        "customer_phone": null,
        "customer_shipping": null,
        "customer_tax_exempt": "none",
        "customer_tax_ids": [],
        "default_payment_method": null,
        "default_source": null,
        "default_tax_rates": [],
        "description": null,
        "discounts": [],
        "due_date": null,
        "effective_at": finalized_at,
        "ending_balance": if draft { Value::Null } else { json!(0) },
        "footer": null,
        "from_invoice": null
    });
    let rest = json!({
        "hosted_invoice_url": if draft { Value::Null } else { json!(format!("https://invoice.stripe.com/i/{}", suffix(id))) },
        "invoice_pdf": if draft { Value::Null } else { json!(format!("https://pay.stripe.com/invoice/{}/pdf", suffix(id))) },
        "issuer": { "type": "self" },
        "last_finalization_error": null,
        "latest_revision": null,
        "lines": {
            "object": "list",
            "data": [],
            "has_more": false,
            "total_count": 0,
            "url": format!("/v1/invoices/{id}/lines")
        },
        "livemode": false,
        "metadata": {},
        "next_payment_attempt": null,
        "number": if draft { Value::Null } else { json!(format!("EMU-{:04}", h % 10_000)) },
        "on_behalf_of": null,
        "parent": null,
        "period_end": created,
        "period_start": created,
        "post_payment_credit_notes_amount": 0,
        "pre_payment_credit_notes_amount": 0,
        "receipt_number": null,
        "shipping_cost": null,
        "shipping_details": null,
        "starting_balance": 0,
        "statement_descriptor": null,
        "status": status,
        "status_transitions": {
            "finalized_at": finalized_at,
            "marked_uncollectible_at": if status == "uncollectible" { json!(created + 7200) } else { Value::Null },
            "paid_at": if paid { json!(created + 3600) } else { Value::Null },
            "voided_at": if status == "void" { json!(created + 7200) } else { Value::Null }
        },
        "subtotal": amount_due,
        "subtotal_excluding_tax": amount_due,
        "test_clock": null,
        "total": amount_due,
        "total_discount_amounts": [],
        "total_excluding_tax": amount_due,
        "total_taxes": [],
        "webhooks_delivered_at": created
    });
    merge(head, rest)
}

/// The `reporting_category` of a balance transaction `type`, per
/// <https://docs.stripe.com/reports/reporting-categories> (the common
/// types; any other keeps its type's name, which callers may change).
fn reporting_category(kind: &str) -> &str {
    match kind {
        "charge" | "payment" => "charge",
        "refund" | "payment_refund" => "refund",
        "payout" => "payout",
        "payout_cancel" | "payout_failure" => "payout_reversal",
        "stripe_fee" | "stripe_fx_fee" | "tax_fee" => "fee",
        "adjustment" => "other_adjustment",
        other => other,
    }
}

pub(crate) fn balance_transaction(
    id: &str,
    amount: i64,
    fee: i64,
    currency: &str,
    kind: &str,
    source: Option<&str>,
    created: i64,
) -> Value {
    let currency = currency.to_ascii_lowercase();
    let fee_details = if fee == 0 {
        json!([])
    } else {
        json!([{
            "amount": fee,
            "application": null,
            "currency": currency,
            "description": "Stripe processing fees",
            "type": "stripe_fee"
        }])
    };
    json!({
        "id": id,
        "object": "balance_transaction",
        "amount": amount,
        "available_on": created + 2 * 86_400,
        "created": created,
        "currency": currency,
        "description": null,
        "exchange_rate": null,
        "fee": fee,
        "fee_details": fee_details,
        "net": amount - fee,
        "reporting_category": reporting_category(kind),
        "source": source,
        "status": "available",
        "type": kind
    })
}

pub(crate) fn payout(
    id: &str,
    amount: i64,
    currency: &str,
    status: &str,
    created: i64,
    arrival_date: i64,
) -> Value {
    let h = hash(id);
    let sfx = suffix(id);
    let failed = status == "failed";
    json!({
        "id": id,
        "object": "payout",
        "amount": amount,
        "arrival_date": arrival_date,
        "automatic": true,
        "balance_transaction": format!("txn_{sfx}"),
        "created": created,
        "currency": currency.to_ascii_lowercase(),
        "description": "STRIPE PAYOUT",
        "destination": derived_id("ba_", h % 3),
        "failure_balance_transaction": if failed { json!(derived_id("txn_", h ^ 0xfa11)) } else { Value::Null },
        "failure_code": if failed { json!("account_closed") } else { Value::Null },
        "failure_message": if failed { json!("The bank account has been closed.") } else { Value::Null },
        "livemode": false,
        "metadata": {},
        "method": "standard",
        "original_payout": null,
        "reconciliation_status": if status == "paid" { "completed" } else { "in_progress" },
        "reversed_by": null,
        "source_type": "card",
        "statement_descriptor": null,
        "status": status,
        "type": "bank_account"
    })
}

/// `json!` recurses per field; the largest objects are built in two halves.
fn merge(mut head: Value, rest: Value) -> Value {
    if let (Some(h), Value::Object(r)) = (head.as_object_mut(), rest) {
        h.extend(r);
    }
    head
}
