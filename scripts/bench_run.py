"""Benchmark `recon run` end to end, as users run it, against `recon diff`.

Two scenarios (issue "recon run at the speed of recon diff"):

1. Backfill after an incident: a CSV source of N charges (default 200,000)
   against an empty PostgreSQL `payments` table with a unique key,
   `mode = "insert"`, once with a SQLite state store and once with a
   PostgreSQL one. First its dry run (plan.jsonl of N lines, streamed:
   time and RSS per gap). Measures the wall time and peak RSS of `recon run`, the
   backfilled rows per second, and the RSS per gap above the peak of
   `recon diff` of the same source against an empty export (the diff's own
   memory). Then a rerun, which finds the N discrepancies resolved.
   Targets: >= 50,000 backfilled rows/s; <= 1 KiB per gap above the diff's
   own peak; the rerun within the same bounds.

2. Nightly dry run of large exports: the bench-diff CSV pairs (2M and 10M
   rows by default) through `recon run --dry-run` with a file source and a
   file target, against `recon diff` on the same files: once on an empty
   state store (the first run) and once more on the same files (the nightly
   run, whose history already holds every discrepancy). Target: each within
   1.3x of diff's wall time, with identical counts.

Each measured command runs in its own process started by the tiny launcher
of bench_diff.py (wall time and wait4 ru_maxrss of that process alone).
Missed targets are printed; the exit status is non-zero only when a run
fails or the counts differ.

Run it through scripts/bench-run.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_diff  # noqa: E402  (dataset generation and the launcher)

REPO = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/test"
DAY = 1795824000  # 2026-11-28T00:00:00Z


def psql(db, sql):
    subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-c", sql],
                   check=True, stdout=subprocess.DEVNULL)


def fresh_pg(name):
    psql("test", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql("test", f"CREATE DATABASE {name}")
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def write_source(path, n):
    with open(path, "w") as f:
        f.write("id,amount,currency,status,created\n")
        for i in range(n):
            f.write(f"ch_{i:08d},{1000 + i % 9000},{('usd', 'eur', 'jpy')[i % 3]},succeeded,"
                    f"{DAY + (i * 86399) // n}\n")


def backfill_config(path, source, target_url, state_url, reports):
    path.write_text(f"""
[defaults]
timezone = "UTC"
reports = "{reports}"
state = "{state_url}"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "2026-11-28"

[jobs.charges.source]
type = "file"
path = "{source}"
key = "id"

[jobs.charges.target]
type = "sql"
url = "{target_url}"
table = "payments"
key = "stripe_charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.charges.backfill]
mode = "insert"
max_records = 100000000
max_ratio = 1.0
""")


def dry_run_config(path, source, target, reports, state_url):
    path.write_text(f"""
[defaults]
reports = "{reports}"
state = "{state_url}"

[jobs.files]
compare = ["amount", "currency", "status", "created"]
window = "2026-11-01..2026-12-01"
backfill = {{ mode = "off" }}

[jobs.files.source]
type = "file"
path = "{source}"
key = "id"

[jobs.files.target]
type = "file"
path = "{target}"
key = "id"
""")


def run(cmd, log):
    code, wall, rss = bench_diff.measure(cmd, log)
    if code not in (0, 1):
        print(f"  FAILED (exit {code}): {' '.join(map(str, cmd))}")
        print(bench_diff.tail(log))
        return None
    return wall, rss


def summary(out):
    return json.loads((out / "summary.json").read_text())


COUNTS = ["source_records", "target_records", "matched", "gaps", "orphans",
          "mismatches", "duplicates"]


def backfill(recon, n, work, state_kind):
    print(f"backfill: {n} gaps, CSV -> PostgreSQL, {state_kind} state")
    d = bench_diff.fresh_dir(work / f"backfill-{state_kind}")
    source = d / "charges.csv"
    write_source(source, n)
    empty = d / "empty.csv"
    empty.write_text("id,amount,currency,status,created\n")
    target = fresh_pg("recon_bench_target")
    psql("recon_bench_target", "CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, "
         "amount_cents BIGINT, currency TEXT, status TEXT, created_at TIMESTAMPTZ)")
    if state_kind == "sqlite":
        state = f"sqlite://{d / 'state.db'}?mode=rwc"
        dry_state = f"sqlite://{d / 'dry-state.db'}?mode=rwc"
    else:
        state = fresh_pg("recon_bench_state")
        dry_state = fresh_pg("recon_bench_dry_state")
    config = d / "recon.toml"
    backfill_config(config, source, target, state, d / "reports")
    # The dry run keeps its own state: the first run is a first run.
    dry_config = d / "dry.toml"
    backfill_config(dry_config, source, target, dry_state, d / "reports")
    diff = run([recon, "diff", source, empty, "--key", "id", "--compare",
                "amount,currency,status", "--out", d / "diff"], d / "diff.log")
    # The dry run first (it writes nothing but its plan.jsonl, streamed).
    dry = run([recon, "run", "--config", dry_config, "--dry-run", "--out", d / "dry"],
              d / "dry.log")
    first = run([recon, "run", "--config", config, "--out", d / "run1"], d / "run1.log")
    if diff is None or dry is None or first is None:
        return False
    planned = len((d / "dry" / "plan.jsonl").read_text().splitlines())
    s = summary(d / "run1")
    rerun = run([recon, "run", "--config", config, "--out", d / "run2"], d / "run2.log")
    if rerun is None:
        return False
    s2 = summary(d / "run2")
    ok = (s["backfilled"] == n and s2["backfilled"] == 0 and s2["matched"] == n
          and planned == n)
    per_gap = max(first[1] - diff[1], 0) * 1024 * 1024 / n
    rate = n / first[0]
    print(f"  recon diff (the diff's own): {diff[0]:.2f} s, {diff[1]:.0f} MiB")
    print(f"  dry run:     {dry[0]:.2f} s, {dry[1]:.0f} MiB, planned {planned}, "
          f"{max(dry[1] - diff[1], 0) * 1024 * 1024 / n:.0f} B per gap above the diff")
    print(f"  recon run:   {first[0]:.2f} s, {first[1]:.0f} MiB, backfilled {s['backfilled']}, "
          f"{rate:,.0f} rows/s (target >= 50,000), {per_gap:.0f} B per gap above the diff "
          f"(target <= 1024)")
    print(f"  rerun:       {rerun[0]:.2f} s, {rerun[1]:.0f} MiB, matched {s2['matched']}, "
          f"resolved {len(open(d / 'run2' / 'resolved.csv').read().splitlines()) - 1}, "
          f"{n / rerun[0]:,.0f} rows/s")
    if not ok:
        print(f"  COUNTS WRONG: planned {planned}, run1 {s}, run2 {s2}")
    return ok


def dry_run(recon, n, args, work):
    print(f"dry run: {n} rows, CSV pair (bench-diff data)")
    data, _meta = bench_diff.dataset(n, args.seed, REPO / "target" / "bench-data")
    d = bench_diff.fresh_dir(work / f"dry-{n}")
    config = d / "recon.toml"
    dry_run_config(config, data / "source.csv", data / "target.csv", d / "reports",
                   f"sqlite://{d / 'state.db'}?mode=rwc")
    state = d / "state.db"
    best = {}
    for _ in range(args.repeat):
        # The first run starts from an empty state store; the nightly run is
        # the same run again, when the history already holds every
        # discrepancy (they persist): what a scheduled dry run does each night.
        for suffix in ["", "-shm", "-wal"]:
            Path(f"{state}{suffix}").unlink(missing_ok=True)
        for name, cmd in [
            ("diff", [recon, "diff", data / "source.csv", data / "target.csv", "--key", "id",
                      "--compare", ",".join(bench_diff.COMPARED), "--out", d / "diff"]),
            ("first", [recon, "run", "--config", config, "--dry-run", "--out", d / "first"]),
            ("nightly", [recon, "run", "--config", config, "--dry-run", "--out", d / "run"]),
        ]:
            r = run(cmd, d / f"{name}.log")
            if r is None:
                return False
            if name not in best or r[0] < best[name][0]:
                best[name] = r
    a = summary(d / "diff")
    same = True
    print(f"  recon diff:          {best['diff'][0]:.2f} s, {best['diff'][1]:.0f} MiB")
    for name, label in [("first", "first run"), ("nightly", "nightly run")]:
        b = summary(d / ("first" if name == "first" else "run"))
        ok = all(a.get(k) == b.get(k) for k in COUNTS)
        same &= ok
        ratio = best[name][0] / best["diff"][0]
        print(f"  recon run --dry-run, {label + ':':12} {best[name][0]:.2f} s, "
              f"{best[name][1]:.0f} MiB, time ratio {ratio:.2f} (target <= 1.3), "
              f"counts {'IDENTICAL' if ok else 'DIFFER'}")
        if not ok:
            print(f"  diff {[a.get(k) for k in COUNTS]} run {[b.get(k) for k in COUNTS]}")
    return same


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recon", default=str(REPO / "target" / "release" / "recon"))
    p.add_argument("--gaps", type=int, default=200_000)
    p.add_argument("--rows", type=int, nargs="*", default=[2_000_000, 10_000_000])
    p.add_argument("--state", nargs="*", default=["sqlite", "postgres"])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-backfill", action="store_true")
    args = p.parse_args()
    work = REPO / "target" / "bench-run"
    work.mkdir(parents=True, exist_ok=True)
    ok = True
    if not args.skip_backfill:
        for kind in args.state:
            ok &= backfill(args.recon, args.gaps, work, kind)
    for n in args.rows:
        ok &= dry_run(args.recon, n, args, work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
