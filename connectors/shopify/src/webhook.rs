//! `envelope = "shopify"`: a gap replayed as Shopify delivers webhooks
//! (<https://shopify.dev/docs/apps/build/webhooks>): the order itself, with
//! `X-Shopify-Topic` (default `orders/create`), `X-Shopify-Webhook-Id`, and
//! `X-Shopify-Hmac-Sha256` (base64 HMAC-SHA256 of the body) when signing.

use recon_core::{Delivery, Signed, WebhookEnvelope};

/// Shopify's webhook envelope.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShopifyEnvelope;

impl WebhookEnvelope for ShopifyEnvelope {
    fn provider_name(&self) -> &'static str {
        "Shopify"
    }

    fn default_event_type(&self) -> &'static str {
        "orders/create"
    }

    fn wrap(&self, object: serde_json::Value, _: &Delivery<'_>) -> serde_json::Value {
        object
    }

    fn headers(&self, d: &Delivery<'_>) -> Vec<(&'static str, String)> {
        vec![
            ("X-Shopify-Topic", d.event_type.to_string()),
            ("X-Shopify-Webhook-Id", d.key.to_string()),
        ]
    }

    fn signature_headers(&self, signed: &Signed<'_>) -> Vec<(&'static str, String)> {
        vec![("X-Shopify-Hmac-Sha256", base64(signed.body_hmac))]
    }

    fn planned_signature_headers(&self) -> Vec<(&'static str, &'static str)> {
        vec![("X-Shopify-Hmac-Sha256", "***")]
    }
}

/// Base64 (standard alphabet, padded), for `X-Shopify-Hmac-Sha256`.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_padded_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
        assert_eq!(base64(b"any carnal pleas"), "YW55IGNhcm5hbCBwbGVhcw==");
        assert_eq!(base64(b"any carnal pleasu"), "YW55IGNhcm5hbCBwbGVhc3U=");
        assert_eq!(base64(b"any carnal pleasur"), "YW55IGNhcm5hbCBwbGVhc3Vy");
    }

    #[test]
    fn deliveries_carry_the_topic_and_key_and_the_order_unwrapped() {
        let d = Delivery {
            event_type: "orders/create",
            key: "recon-ab",
            created: None,
        };
        let order = serde_json::json!({"id": 1});
        assert_eq!(ShopifyEnvelope.wrap(order.clone(), &d), order);
        assert_eq!(
            ShopifyEnvelope.headers(&d),
            [
                ("X-Shopify-Topic", "orders/create".to_string()),
                ("X-Shopify-Webhook-Id", "recon-ab".to_string())
            ]
        );
        let signed = Signed {
            recon: "t=1,v1=00",
            body_hmac: b"foo",
        };
        assert_eq!(
            ShopifyEnvelope.signature_headers(&signed),
            [("X-Shopify-Hmac-Sha256", "Zm9v".to_string())]
        );
    }
}
