//! Writing a report folder aside and swapping it in whole when complete.
//!
//! [`ReportDir::prepare`] checks the destination and creates a hidden
//! staging folder beside it (same parent, so the same file system) before
//! anything else happens: a destination that is a file, a link, a folder of
//! other things or an unwritable place fails there, before a run writes to
//! its target. Files are written into the staging folder; only
//! [`ReportDir::commit`] touches the destination, by renames:
//!
//! 1. a new destination: staging → destination, one atomic rename;
//! 2. an existing report folder: destination → hidden backup, staging →
//!    destination, then the backup is deleted. If the second rename fails
//!    the backup is renamed back, so the old folder is complete again.
//!
//! The old folder is therefore complete until the new one is complete, and
//! a folder never mixes two runs' files. Dropped without commit, the
//! staging folder (and any parent folder this run created) is removed and
//! the destination is untouched.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The file whose presence marks a folder as recon's reports.
const MARKER: &str = "summary.json";

/// A report folder being written.
pub struct ReportDir {
    dest: PathBuf,
    parent: PathBuf,
    name: String,
    staging: PathBuf,
    /// Folders above the destination this run created, deepest last; a
    /// failed run removes them again so it leaves no trace.
    created: Vec<PathBuf>,
    committed: bool,
}

/// A name unique to this process and moment, for hidden sibling folders.
fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// Removes the staging folders (`.NAME.partial-PID-NANOS`) that runs of
/// this machine left in `parent` when they died (SIGKILL, a second signal,
/// power loss): their process is gone. Only decidable where `/proc`
/// exists; elsewhere nothing is removed.
fn remove_stale_staging(parent: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = staging_pid(&name) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        match fs::remove_dir_all(&path) {
            Ok(()) => tracing::warn!(
                message = "Removed the staging folder of a run that died.",
                folder = %path.display(),
            ),
            Err(e) => tracing::warn!(
                message = "Cannot remove the staging folder of a run that died; delete it by hand.",
                folder = %path.display(),
                error = %e,
            ),
        }
    }
}

/// The process id in a staging folder's name `.NAME.partial-PID-NANOS`.
fn staging_pid(name: &str) -> Option<u32> {
    if !name.starts_with('.') {
        return None;
    }
    let (_, suffix) = name.rsplit_once(".partial-")?;
    let (pid, nanos) = suffix.split_once('-')?;
    nanos.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
    pid.parse().ok()
}

impl ReportDir {
    /// Checks that reports can be written into `dest` and creates the
    /// staging folder beside it. Call it before anything is written to a
    /// target: every way the reports could fail to land that can be seen
    /// without writing them is seen here.
    ///
    /// `dest` may be missing (it is created, with its parents), an empty
    /// folder, or an earlier report folder (one holding `summary.json`),
    /// which [`ReportDir::commit`] replaces whole. A file, a symbolic link
    /// or a folder holding other things is refused: replacing it whole
    /// would delete what is in it.
    pub fn prepare(dest: &Path) -> Result<ReportDir> {
        // `a/./b/` and `a/b` are the same folder.
        let dest: PathBuf = dest.components().collect();
        let Some(name) = dest.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            bail!(
                "report destination `{}` names no folder; give a folder path such as reports/nightly",
                dest.display()
            );
        };
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        match fs::symlink_metadata(&dest) {
            Ok(m) if m.file_type().is_symlink() => bail!(
                "report destination {} is a symbolic link; give the folder it points to, or a new folder, with --out",
                dest.display()
            ),
            Ok(m) if !m.is_dir() => bail!(
                "report destination {} is a file, not a folder; give a new or empty folder with --out",
                dest.display()
            ),
            Ok(_) => {
                let mut entries = fs::read_dir(&dest)
                    .with_context(|| format!("cannot read the report folder {}", dest.display()))?;
                if entries.next().is_some() && !dest.join(MARKER).is_file() {
                    bail!(
                        "report destination {} holds files that are not recon reports (no {MARKER}); \
                         recon replaces a report folder whole, so give a new or empty folder with --out",
                        dest.display()
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot inspect the report destination {}", dest.display())
                })
            }
        }
        let mut created = Vec::new();
        let mut missing = parent.as_path();
        while fs::symlink_metadata(missing).is_err() {
            created.push(missing.to_path_buf());
            match missing.parent() {
                Some(p) if !p.as_os_str().is_empty() => missing = p,
                _ => break,
            }
        }
        created.reverse();
        remove_stale_staging(&parent);
        let staging = parent.join(format!(".{name}.partial-{}", unique_suffix()));
        let dir = ReportDir {
            dest: dest.clone(),
            parent: parent.clone(),
            name,
            staging: staging.clone(),
            created,
            committed: false,
        };
        // From here on, dropping `dir` removes what was created.
        fs::create_dir_all(&parent).with_context(|| {
            format!(
                "cannot create the report folder {}; check the path and its permissions",
                parent.display()
            )
        })?;
        fs::create_dir(&staging).with_context(|| {
            format!(
                "cannot create a staging folder in {}; check that it is a writable folder",
                parent.display()
            )
        })?;
        Ok(dir)
    }

    /// Same as [`ReportDir::prepare`].
    pub fn create(dest: &Path) -> Result<ReportDir> {
        ReportDir::prepare(dest)
    }

    /// Where the reports will be once committed.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The staged copy of a file written so far, to read it back before
    /// commit (for example to take its digest).
    pub fn staged(&self, name: &str) -> PathBuf {
        self.staging.join(name)
    }

    /// Opens a new file in the staging folder. Its write errors name the
    /// file and the report folder (a full disk says where).
    pub fn file(&mut self, name: &str) -> Result<ReportFile> {
        let path = self.staging.join(name);
        let shown = format!(
            "{name} of the report folder {} (staged in {})",
            self.dest.display(),
            self.staging.display()
        );
        let f = fs::File::create(&path).with_context(|| format!("cannot create {shown}"))?;
        Ok(ReportFile {
            shown,
            inner: BufWriter::with_capacity(1 << 16, f),
        })
    }

    /// Writes a whole file at once.
    pub fn write_all(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let mut f = self.file(name)?;
        f.write_all(bytes)?;
        f.flush()?;
        f.inner.get_ref().sync_all().ok();
        Ok(())
    }

    /// Swaps the staged folder in for the destination; see the module docs.
    pub fn commit(mut self) -> Result<PathBuf> {
        let exists = match fs::symlink_metadata(&self.dest) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot inspect the report destination {}",
                        self.dest.display()
                    )
                })
            }
        };
        if !exists {
            fs::rename(&self.staging, &self.dest)
                .with_context(|| format!("cannot move reports into {}", self.dest.display()))?;
        } else {
            let backup = self
                .parent
                .join(format!(".{}.old-{}", self.name, unique_suffix()));
            fs::rename(&self.dest, &backup).with_context(|| {
                format!(
                    "cannot move the old reports in {} aside; they are untouched and the new reports were not written",
                    self.dest.display()
                )
            })?;
            if let Err(e) = fs::rename(&self.staging, &self.dest) {
                let restored = fs::rename(&backup, &self.dest);
                return Err(e).with_context(|| match restored {
                    Ok(()) => format!(
                        "cannot move the new reports into {}; the old reports are back in place",
                        self.dest.display()
                    ),
                    Err(r) => format!(
                        "cannot move the new reports into {}, nor the old ones back ({r}); the old reports are in {}",
                        self.dest.display(),
                        backup.display()
                    ),
                });
            }
            if let Err(e) = fs::remove_dir_all(&backup) {
                tracing::warn!(
                    message = "The new reports are in place, but the old ones could not be deleted; delete them by hand.",
                    old = %backup.display(),
                    error = %e,
                );
            }
        }
        self.committed = true;
        // Make the renames durable (best effort: not every platform can
        // sync a folder).
        if let Ok(f) = fs::File::open(&self.parent) {
            let _ = f.sync_all();
        }
        Ok(self.dest.clone())
    }
}

/// A report file being written into the staging folder: buffered, and
/// every I/O error says which file of which report folder it hit.
pub struct ReportFile {
    shown: String,
    inner: BufWriter<fs::File>,
}

impl ReportFile {
    fn named(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("cannot write {}: {e}", self.shown))
    }
}

impl Write for ReportFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.named(e))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf).map_err(|e| self.named(e))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.named(e))
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
    use std::collections::BTreeMap;

    /// Every file of a folder with its bytes.
    fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn nothing_appears_until_commit_and_a_failed_run_leaves_no_trace() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("run");
        {
            let mut r = ReportDir::prepare(&dest).unwrap();
            r.write_all("gaps.csv", b"x").unwrap();
            assert!(!dest.exists());
        }
        assert!(!dest.exists());
        assert_eq!(names(tmp.path()), Vec::<String>::new());
        {
            let nested = tmp.path().join("a/b/run");
            let mut r = ReportDir::prepare(&nested).unwrap();
            r.write_all("gaps.csv", b"x").unwrap();
        }
        assert_eq!(
            names(tmp.path()),
            Vec::<String>::new(),
            "folders created for a failed run are removed"
        );
    }

    #[test]
    fn an_old_folder_is_replaced_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("run");
        let mut r = ReportDir::prepare(&dest).unwrap();
        r.write_all("plan.jsonl", b"old").unwrap();
        r.write_all("summary.json", b"{}").unwrap();
        r.commit().unwrap();
        fs::write(dest.join("notes.txt"), b"someone's extra file").unwrap();

        let mut r = ReportDir::prepare(&dest).unwrap();
        r.write_all("backfill.csv", b"new").unwrap();
        // Until commit the old folder is complete.
        assert_eq!(names(&dest), ["notes.txt", "plan.jsonl", "summary.json"]);
        r.write_all("summary.json", b"{\"n\":1}").unwrap();
        r.commit().unwrap();
        let after = snapshot(&dest);
        assert_eq!(
            after.keys().map(String::as_str).collect::<Vec<_>>(),
            ["backfill.csv", "summary.json"],
            "old files, known or not, are gone"
        );
        assert_eq!(after["summary.json"], b"{\"n\":1}");
        assert_eq!(names(tmp.path()), ["run"], "no staging or backup left");
    }

    #[test]
    fn a_failed_swap_puts_the_old_folder_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("run");
        let mut r = ReportDir::prepare(&dest).unwrap();
        r.write_all("gaps.csv", b"old gaps").unwrap();
        r.write_all("summary.json", b"{}").unwrap();
        r.commit().unwrap();
        let before = snapshot(&dest);

        let mut r = ReportDir::prepare(&dest).unwrap();
        r.write_all("summary.json", b"new").unwrap();
        // The staged folder vanishes: its rename into place must fail.
        fs::remove_dir_all(&r.staging).unwrap();
        let e = r.commit().unwrap_err();
        assert!(
            format!("{e:#}").contains("the old reports are back in place"),
            "{e:#}"
        );
        assert_eq!(snapshot(&dest), before);
        assert_eq!(names(tmp.path()), ["run"]);
    }

    #[test]
    fn refuses_destinations_it_cannot_replace_before_anything_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("a-file");
        fs::write(&file, b"keep me").unwrap();
        let e = ReportDir::prepare(&file).err().unwrap().to_string();
        assert!(e.contains("is a file"), "{e}");
        let e = ReportDir::prepare(&file.join("sub")).err().unwrap();
        let e = format!("{e:#}");
        assert!(e.contains("cannot") && e.contains("a-file"), "{e}");
        let other = tmp.path().join("project");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("source.csv"), b"data").unwrap();
        let e = ReportDir::prepare(&other).err().unwrap().to_string();
        assert!(e.contains("not recon reports"), "{e}");
        #[cfg(unix)]
        {
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(&other, &link).unwrap();
            let e = ReportDir::prepare(&link).err().unwrap().to_string();
            assert!(e.contains("symbolic link"), "{e}");
        }
        assert_eq!(fs::read(&file).unwrap(), b"keep me");
        assert_eq!(fs::read(other.join("source.csv")).unwrap(), b"data");
        assert_eq!(names(tmp.path()), ["a-file", "link", "project"]);
        // An empty folder is fine.
        let empty = tmp.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let mut r = ReportDir::prepare(&empty).unwrap();
        r.write_all("summary.json", b"{}").unwrap();
        r.commit().unwrap();
        assert_eq!(names(&empty), ["summary.json"]);
    }
}
