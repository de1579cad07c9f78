//! `recon report`: writes report.html again for one run of a job, with
//! charts of the job's runs up to it (`--runs`, default 30).
//!
//! The numbers come from the run's report folder (summary.json and the CSVs
//! beside it) and the state store (the earlier runs). By default the page
//! replaces report.html in the run's own folder, written aside and renamed
//! over the old one, so a reader never sees half a page; `--out DIR` writes
//! `DIR/report.html` instead, linking to the run's files from there.

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use recon_core::FieldKind;

use crate::cli::ReportArgs;
use crate::config;
use crate::report::html;
use crate::state::ReportReads;
use crate::state::StateStore;
use crate::Status;

/// The `recon report` command.
pub fn run(args: ReportArgs) -> Result<Status> {
    let file = config::load(&args.config)?;
    let job = file.job(args.job.as_deref())?;
    let money_field = job
        .job
        .fields
        .iter()
        .find(|(_, k)| **k == FieldKind::Money)
        .map(|(n, _)| n.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let written = runtime.block_on(async {
        let state = StateStore::open(job.state.expose()).await?;
        let folder = run_folder(&state, &job.name, args.run.as_deref()).await?;
        let out = args.out.clone().unwrap_or_else(|| folder.clone());
        std::fs::create_dir_all(&out).with_context(|| {
            format!(
                "cannot create the folder {}; check the path and its permissions",
                out.display()
            )
        })?;
        let prefix = link_prefix(&out, &folder)?;
        let page = html::render_folder(
            &folder,
            &state,
            &job.name,
            money_field.as_deref(),
            usize::from(args.runs),
            &prefix,
            true,
        )
        .await?;
        state.close().await;
        write_atomically(&out.join(html::FILE), page.as_bytes())
    })?;
    println!("report: {}", written.display());
    Ok(Status::Clean)
}

/// The report folder of run `run` of the job, or of its latest run that
/// left one.
async fn run_folder(state: &StateStore, job: &str, run: Option<&str>) -> Result<PathBuf> {
    let runs = state.recent_runs(Some(job), usize::MAX).await?;
    if runs.is_empty() {
        bail!(
            "job `{job}` has no runs in the state store {}; run `recon run --job {job}` first",
            state.describe()
        );
    }
    let with_folder = |r: &crate::state::RunRow| {
        r.report_dir
            .as_ref()
            .map(PathBuf::from)
            .filter(|d| d.join("summary.json").is_file())
    };
    match run {
        Some(id) => {
            let Some(r) = runs.iter().find(|r| r.id == id) else {
                bail!("job `{job}` has no run `{id}`; `recon runs --job {job}` lists its runs");
            };
            with_folder(r).with_context(|| {
                format!(
                    "run `{id}` of job `{job}` has no report folder with a summary.json (it {}, folder {}); \
                     pick another with --run",
                    r.status,
                    r.report_dir.as_deref().unwrap_or("none")
                )
            })
        }
        None => runs.iter().find_map(with_folder).with_context(|| {
            format!(
                "no run of job `{job}` has a report folder with a summary.json any more; \
                 run the job again, or pick a run with --run"
            )
        }),
    }
}

/// How a page in `out` links to the files of `folder`: `""` when they are
/// the same folder, else the relative path (`../run-1/`) as a URL path,
/// each folder name percent-encoded ([`html::push_segment`]): a job named
/// `eu#2` has its runs in `reports/eu#2/`, which a link must spell
/// `reports/eu%232/` or the browser reads the rest as a fragment.
fn link_prefix(out: &Path, folder: &Path) -> Result<String> {
    let out = out
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", out.display()))?;
    let folder = folder
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", folder.display()))?;
    if out == folder {
        return Ok(String::new());
    }
    let a: Vec<Component> = out.components().collect();
    let b: Vec<Component> = folder.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut rel = String::new();
    for _ in common..a.len() {
        rel.push_str("../");
    }
    for c in &b[common..] {
        let part = c.as_os_str().to_str().with_context(|| {
            format!("the report folder {} is not valid UTF-8", folder.display())
        })?;
        html::push_segment(&mut rel, part);
        rel.push('/');
    }
    Ok(rel)
}

/// Writes `path` by a temporary file beside it and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".report.html.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| {
            format!(
                "cannot write {}; check the folder's permissions",
                path.display()
            )
        });
    }
    Ok(path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_from_another_folder_are_relative() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("reports/charges/run-1");
        let out = tmp.path().join("mail");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        assert_eq!(link_prefix(&run, &run).unwrap(), "");
        assert_eq!(
            link_prefix(&out, &run).unwrap(),
            "../reports/charges/run-1/"
        );
        let odd = tmp.path().join("reports/a#b%c?d e/a#b%c?d e-1");
        std::fs::create_dir_all(&odd).unwrap();
        assert_eq!(
            link_prefix(&out, &odd).unwrap(),
            "../reports/a%23b%25c%3Fd%20e/a%23b%25c%3Fd%20e-1/"
        );
        let p = write_atomically(&out.join("report.html"), b"<p>x</p>").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"<p>x</p>");
        let names: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }
}
