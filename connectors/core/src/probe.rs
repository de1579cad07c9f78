//! What `recon check` learns from one cheap call to a system, without
//! reading a window: that it answers, that it accepts the credentials, and
//! the limits and remaining quota it reports.

/// The answer of [`crate::Source::probe`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// What answered, for the check's line (`Stripe charges at
    /// https://api.stripe.com`, `postgres://app:***@db/finance table
    /// payments`); never a secret.
    pub reached: String,
    /// Whether an authenticated call succeeded (an API accepted the token),
    /// as opposed to a system without credentials (an export file).
    pub authenticated: bool,
    /// Provider limits and remaining quota, as the provider reported them
    /// on this call or documents them (`25 req/s (Stripe's test-mode
    /// limit)`, `98 of 100 requests left in the 10-s window`).
    pub limits: Vec<String>,
}

impl Probe {
    /// A probe of `reached` with no credentials and no limits.
    pub fn reached(reached: impl Into<String>) -> Probe {
        Probe {
            reached: reached.into(),
            authenticated: false,
            limits: Vec::new(),
        }
    }

    /// The same, with an authenticated call.
    pub fn authenticated(mut self) -> Probe {
        self.authenticated = true;
        self
    }

    /// The same, with one more limit.
    pub fn limit(mut self, limit: impl Into<String>) -> Probe {
        self.limits.push(limit.into());
        self
    }
}
