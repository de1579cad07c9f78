//! `envelope = "stripe"`: a gap replayed as Stripe delivers webhooks
//! (<https://docs.stripe.com/webhooks>): an `event` object whose
//! `data.object` is the record (<https://docs.stripe.com/api/events/object>),
//! signed in `Stripe-Signature` with Stripe's scheme
//! (<https://docs.stripe.com/webhooks#verify-manually>).

use recon_core::{Delivery, Signed, WebhookEnvelope};

/// Stripe's webhook envelope.
#[derive(Clone, Copy, Debug, Default)]
pub struct StripeEnvelope;

impl WebhookEnvelope for StripeEnvelope {
    fn default_event_type(&self) -> &'static str {
        "charge.succeeded"
    }

    /// The event's `id` is derived from the idempotency key (`evt_` + its
    /// first 24 hex digits), so the same gap is always the same event;
    /// `created` is the record's time (Unix seconds).
    fn wrap(&self, object: serde_json::Value, d: &Delivery<'_>) -> serde_json::Value {
        let digest = d.key.trim_start_matches("recon-");
        let livemode = object
            .get("livemode")
            .cloned()
            .unwrap_or(serde_json::Value::Bool(false));
        serde_json::json!({
            "id": format!("evt_{}", &digest[..digest.len().min(24)]),
            "object": "event",
            "api_version": null,
            "created": d.created.unwrap_or(0),
            "data": { "object": object },
            "livemode": livemode,
            "pending_webhooks": 1,
            "request": { "id": null, "idempotency_key": d.key },
            "type": d.event_type,
        })
    }

    fn unwrap(&self, body: serde_json::Value) -> serde_json::Value {
        body["data"]["object"].clone()
    }

    fn provider_name(&self) -> &'static str {
        "Stripe"
    }

    /// An `object: "event"` with `data`: its `type` (`""` when missing).
    fn event_type_in<'a>(&self, body: &'a serde_json::Value) -> Option<&'a str> {
        let is_event = body.get("object").and_then(|o| o.as_str()) == Some("event")
            && body.get("data").is_some();
        is_event.then(|| body.get("type").and_then(|t| t.as_str()).unwrap_or(""))
    }

    fn marks_its_bodies(&self) -> bool {
        true
    }

    /// Stripe signs as recon does: the same `t=…,v1=…`.
    fn signature_headers(&self, signed: &Signed<'_>) -> Vec<(&'static str, String)> {
        vec![("Stripe-Signature", signed.recon.to_string())]
    }

    fn planned_signature_headers(&self) -> Vec<(&'static str, &'static str)> {
        vec![("Stripe-Signature", "t=<at send>,v1=***")]
    }

    fn reserved_headers(&self) -> &'static [&'static str] {
        &["Stripe-Signature"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_wraps_the_object_and_unwraps_to_it() {
        let object = serde_json::json!({"id": "ch_1", "livemode": true});
        let d = Delivery {
            event_type: "charge.captured",
            key: "recon-0123456789abcdef0123456789abcdef",
            created: Some(1_700_000_000),
        };
        let event = StripeEnvelope.wrap(object.clone(), &d);
        assert_eq!(event["id"], "evt_0123456789abcdef01234567");
        assert_eq!(event["type"], "charge.captured");
        assert_eq!(event["created"], 1_700_000_000);
        assert_eq!(event["livemode"], true);
        // A wrapped body is recognised with its type; the bare record is not.
        assert_eq!(
            StripeEnvelope.event_type_in(&event),
            Some("charge.captured")
        );
        assert_eq!(StripeEnvelope.event_type_in(&object), None);
        assert!(StripeEnvelope.marks_its_bodies());
        assert_eq!(event["request"]["idempotency_key"], d.key);
        assert_eq!(StripeEnvelope.unwrap(event), object);
    }
}
