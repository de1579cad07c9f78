//! Writing a report folder aside and moving it into place when complete.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Report files a run may leave behind; those this run did not write are
/// removed from the destination when it commits, so a folder never mixes
/// two runs.
const KNOWN_FILES: &[&str] = &[
    "summary.json",
    "summary.csv",
    "gaps.csv",
    "orphans.csv",
    "mismatches.csv",
    "duplicates.csv",
    "pending.csv",
    "resolved.csv",
    "plan.jsonl",
    "backfill.csv",
];

/// A report folder being written. Files go into a hidden staging folder
/// beside the destination; [`ReportDir::commit`] moves them into place,
/// `summary.json` last. Dropped without commit, the staging folder is removed
/// and the destination is untouched.
pub struct ReportDir {
    dest: PathBuf,
    staging: PathBuf,
    /// Folders above the destination this run created, deepest last; a
    /// failed run removes them again so it leaves no trace.
    created: Vec<PathBuf>,
    written: Vec<String>,
    committed: bool,
}

impl ReportDir {
    /// Prepares to write reports into `dest`.
    pub fn create(dest: &Path) -> Result<ReportDir> {
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut created = Vec::new();
        let mut missing = parent.as_path();
        while !missing.exists() {
            created.push(missing.to_path_buf());
            match missing.parent() {
                Some(p) if !p.as_os_str().is_empty() => missing = p,
                _ => break,
            }
        }
        created.reverse();
        fs::create_dir_all(&parent)
            .with_context(|| format!("cannot create report folder {}", parent.display()))?;
        if dest.exists() && !dest.is_dir() {
            anyhow::bail!(
                "report destination {} is a file; give a folder with --out",
                dest.display()
            );
        }
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "reports".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let staging = parent.join(format!(".{name}.partial-{}-{nanos}", std::process::id()));
        fs::create_dir(&staging)
            .with_context(|| format!("cannot create staging folder {}", staging.display()))?;
        Ok(ReportDir {
            dest: dest.to_path_buf(),
            staging,
            created,
            written: Vec::new(),
            committed: false,
        })
    }

    /// Where the reports will be once committed.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Opens a new file in the staging folder.
    pub fn file(&mut self, name: &str) -> Result<BufWriter<fs::File>> {
        let path = self.staging.join(name);
        let f = fs::File::create(&path)
            .with_context(|| format!("cannot write report {}", path.display()))?;
        self.written.push(name.to_string());
        Ok(BufWriter::with_capacity(1 << 16, f))
    }

    /// Writes a whole file at once.
    pub fn write_all(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let mut f = self.file(name)?;
        f.write_all(bytes)?;
        f.flush()?;
        f.get_ref().sync_all().ok();
        Ok(())
    }

    /// Moves every staged file into the destination.
    pub fn commit(mut self) -> Result<PathBuf> {
        if !self.dest.exists() {
            // One atomic rename of the whole folder.
            fs::rename(&self.staging, &self.dest)
                .with_context(|| format!("cannot move reports into {}", self.dest.display()))?;
        } else {
            let mut names = self.written.clone();
            // summary.json last: its presence means the folder is complete.
            names.sort_by_key(|n| n == "summary.json");
            for stale in KNOWN_FILES {
                if !names.iter().any(|n| n == stale) {
                    let p = self.dest.join(stale);
                    if p.exists() {
                        fs::remove_file(&p)
                            .with_context(|| format!("cannot remove old report {}", p.display()))?;
                    }
                }
            }
            for name in &names {
                fs::rename(self.staging.join(name), self.dest.join(name)).with_context(|| {
                    format!("cannot move report {name} into {}", self.dest.display())
                })?;
            }
            fs::remove_dir(&self.staging).ok();
        }
        self.committed = true;
        Ok(self.dest.clone())
    }
}

impl Drop for ReportDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.staging);
            for dir in self.created.iter().rev() {
                // Only empty folders: never anything someone else put there.
                let _ = fs::remove_dir(dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_appears_until_commit_and_stale_files_go() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("run");
        {
            let mut r = ReportDir::create(&dest).unwrap();
            r.write_all("gaps.csv", b"x").unwrap();
            assert!(!dest.exists());
            // Dropped without commit: no destination, no staging left.
        }
        assert!(!dest.exists());
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
        {
            let nested = tmp.path().join("a/b/run");
            let mut r = ReportDir::create(&nested).unwrap();
            r.write_all("gaps.csv", b"x").unwrap();
        }
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "folders created for a failed run are removed"
        );

        let mut r = ReportDir::create(&dest).unwrap();
        r.write_all("plan.jsonl", b"old").unwrap();
        r.write_all("summary.json", b"{}").unwrap();
        r.commit().unwrap();
        let mut r = ReportDir::create(&dest).unwrap();
        r.write_all("backfill.csv", b"new").unwrap();
        r.write_all("summary.json", b"{\"n\":1}").unwrap();
        r.commit().unwrap();
        assert!(!dest.join("plan.jsonl").exists(), "stale plan removed");
        assert_eq!(fs::read(dest.join("backfill.csv")).unwrap(), b"new");
        assert_eq!(fs::read(dest.join("summary.json")).unwrap(), b"{\"n\":1}");
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "no staging left"
        );
    }
}
