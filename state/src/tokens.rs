//! Secrets connectors keep between runs (`recon_connector_secrets`,
//! migration 15): the store side of [`recon_core::TokenStore`]. QuickBooks
//! Online replaces its OAuth refresh token on every refresh, so the newest
//! one must outlive the run that received it. Values arrive encrypted by
//! the connector; the store never sees a token in clear. Runs of one job
//! are serialised by the run lock ([`crate::RunLock`]), so one job never
//! refreshes twice at once.

use std::sync::Arc;

use jiff::Timestamp;
use recon_core::{ConnectorError, Secret, TokenStore};
use sqlx::Row;
use tokio::sync::OnceCell;

use crate::{ts_text, StateError, StateStore};

fn connector_error(e: StateError) -> ConnectorError {
    ConnectorError::Database(format!("the state store's connector secrets: {e}"))
}

impl StateStore {
    /// The value saved under `name`, if any.
    pub async fn connector_secret(&self, name: &str) -> Result<Option<String>, StateError> {
        let context = "reading a connector secret";
        let row = sqlx::query("SELECT value FROM recon_connector_secrets WHERE name = $1")
            .bind(name.to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.db(context))?;
        match row {
            None => Ok(None),
            Some(r) => Ok(Some(r.try_get::<String, _>(0).map_err(self.db(context))?)),
        }
    }

    /// Saves `value` under `name`, replacing what was there.
    pub async fn save_connector_secret(&self, name: &str, value: &str) -> Result<(), StateError> {
        let context = "saving a connector secret";
        sqlx::query(
            "INSERT INTO recon_connector_secrets (name, value, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(name.to_string())
        .bind(value.to_string())
        .bind(ts_text(Timestamp::now()))
        .execute(&self.pool)
        .await
        .map_err(self.db(context))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl TokenStore for StateStore {
    async fn get(&self, name: &str) -> Result<Option<String>, ConnectorError> {
        self.connector_secret(name).await.map_err(connector_error)
    }

    async fn put(&self, name: &str, value: &str) -> Result<(), ConnectorError> {
        self.save_connector_secret(name, value)
            .await
            .map_err(connector_error)
    }
}

/// The job's state store as a [`TokenStore`], opened on first use: jobs
/// whose connectors keep no secrets never open it for this.
pub struct LazyTokens {
    url: Secret,
    store: OnceCell<StateStore>,
}

impl LazyTokens {
    /// The store at `url` (the job's `state`), not opened yet.
    pub fn shared(url: Secret) -> Arc<dyn TokenStore> {
        Arc::new(LazyTokens {
            url,
            store: OnceCell::new(),
        })
    }

    async fn store(&self) -> Result<&StateStore, ConnectorError> {
        self.store
            .get_or_try_init(|| async {
                // Opened on a blocking thread of the runtime: the
                // migration's future is not provably `Send` for every
                // lifetime, which an `async_trait` method requires; a
                // future driven by `block_on` need not be `Send`.
                let url = self.url.expose().to_string();
                let handle = tokio::runtime::Handle::current();
                tokio::task::spawn_blocking(move || handle.block_on(StateStore::open(&url)))
                    .await
                    .map_err(|e| ConnectorError::Database(format!("opening the state store: {e}")))?
                    .map_err(connector_error)
            })
            .await
    }
}

#[async_trait::async_trait]
impl TokenStore for LazyTokens {
    async fn get(&self, name: &str) -> Result<Option<String>, ConnectorError> {
        self.store().await?.get(name).await
    }

    async fn put(&self, name: &str, value: &str) -> Result<(), ConnectorError> {
        self.store().await?.put(name, value).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recon_sql::testing::TestDb;
    use recon_sql::Dialect;

    async fn saved_replaced_and_read_back(dialect: Dialect) {
        let db = TestDb::create(dialect).await;
        let tokens = LazyTokens::shared(Secret::new(db.url.clone()));
        assert_eq!(tokens.get("quickbooks/1").await.unwrap(), None);
        tokens.put("quickbooks/1", "v1:first").await.unwrap();
        tokens.put("quickbooks/1", "v1:second").await.unwrap();
        tokens.put("quickbooks/2", "v1:other").await.unwrap();
        assert_eq!(
            tokens.get("quickbooks/1").await.unwrap().as_deref(),
            Some("v1:second")
        );
        let again = StateStore::open(&db.url).await.unwrap();
        assert_eq!(
            again
                .connector_secret("quickbooks/2")
                .await
                .unwrap()
                .as_deref(),
            Some("v1:other")
        );
        again.close().await;
        drop(tokens);
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn secrets_are_saved_replaced_and_read_back_sqlite() {
        saved_replaced_and_read_back(Dialect::Sqlite).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn secrets_are_saved_replaced_and_read_back_postgres() {
        saved_replaced_and_read_back(Dialect::Postgres).await;
    }
}
