//! `recon check`'s test of the state store: a real write, rolled back.

use super::{StateError, StateStore};

impl StateStore {
    /// Proves the store takes writes without changing it: inside a write
    /// transaction (on SQLite `BEGIN IMMEDIATE`, which takes the write lock),
    /// a run row of `job` is inserted, then the transaction is rolled back.
    /// A read-only file, a full disk or a user without INSERT on
    /// `recon_runs` fails here with the database's own error.
    pub async fn check_writable(&self, job: &str) -> Result<(), StateError> {
        let mut tx = self
            .begin_write("checking that the store takes writes")
            .await?;
        let now = jiff::Timestamp::now().to_string();
        let id = format!("recon-check-{}-{now}", std::process::id());
        sqlx::query(
            "INSERT INTO recon_runs (id, job, window_start, window_end, started_at, status, dry_run) \
             VALUES ($1, $2, $3, $3, $3, 'running', 1)",
        )
        .bind(id)
        .bind(job.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(self.db("writing a test run row (rolled back)"))?;
        tx.rollback()
            .await
            .map_err(self.db("rolling back the test run row"))?;
        Ok(())
    }
}
