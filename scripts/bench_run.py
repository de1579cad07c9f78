"""Benchmark `recon run` end to end, as users run it, against `recon diff`.

Two scenarios (issue "recon run at the speed of recon diff"):

1. Backfill after an incident, as users configure it: a CSV source of N
   Stripe charges (default 200,000; random IDs `ch_` + 24 hex digits, as
   Stripe's look) with typed fields (`amount = "money"`, `currency`,
   `status = "text"`, `created = "timestamp"`), `created` as the time
   field and a 15-minute grace period (as every example config has),
   against an empty PostgreSQL `payments` table shaped like a real
   one (`id bigserial primary key`, `stripe_charge_id text not null
   unique`, amount_cents, currency, status, created_at timestamptz),
   `mode = "insert"`, once with a SQLite state store and once with a
   PostgreSQL one (`--table simple`: the earlier bench's table, the key
   its only index, and sequential IDs). First its dry run (plan.jsonl of N
   lines, streamed: time and RSS per gap). Measures the wall time and peak
   RSS of `recon run`, the backfilled rows per second, and the RSS per gap
   above the peak of `recon diff` of the same source against an empty
   export (the diff's own memory). Then a rerun, which finds the N
   discrepancies resolved.
   Goals: >= 100,000 backfilled rows/s end to end with either state store;
   <= 1 KiB per gap above the diff's own peak.

2. Nightly dry run of large exports: the bench-diff CSV pairs (2M and 10M
   rows by default) through `recon run --dry-run` with a file source and a
   file target, against `recon diff` on the same files: once on an empty
   state store (the first run) and once more on the same files (the nightly
   run, whose history already holds every discrepancy). The job is typed as
   every example config is (the fields above, `created` the time field, a
   15-minute grace, window November 2026, which holds every row); the earlier untyped job
   (no fields, no time field) is measured too, labelled `untyped`. Goal:
   the typed runs within 1.2x of diff's wall time, with identical counts.

Each measured command runs in its own process started by the tiny launcher
of bench_diff.py (wall time and wait4 ru_maxrss of that process alone).
Missed targets are printed; the exit status is non-zero only when a run
fails or the counts differ.

Run it through scripts/bench-run.
"""

import argparse
import json
import random
import shutil
import statistics
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


def charge_ids(n, table, seed):
    """N distinct charge IDs: random like Stripe's (`ch_` + 24 hex digits),
    or, for the simple table, sequential as the earlier bench had them."""
    if table == "simple":
        return [f"ch_{i:08d}" for i in range(n)]
    rng = random.Random(seed)
    ids = set()
    while len(ids) < n:
        ids.add(f"ch_{rng.getrandbits(96):024x}")
    ids = sorted(ids)
    rng.shuffle(ids)  # a CSV export is in time order, not key order
    return ids


def write_source(path, n, table, seed):
    with open(path, "w") as f:
        f.write("id,amount,currency,status,created\n")
        for i, key in enumerate(charge_ids(n, table, seed)):
            f.write(f"{key},{1000 + i % 9000},{('usd', 'eur', 'jpy')[i % 3]},succeeded,"
                    f"{DAY + (i * 86399) // n}\n")


TABLES = {
    # What a payments table looks like: a surrogate primary key of its own,
    # the external ID unique beside it.
    "realistic": "CREATE TABLE payments (id BIGSERIAL PRIMARY KEY, "
                 "stripe_charge_id TEXT NOT NULL UNIQUE, amount_cents BIGINT, currency TEXT, "
                 "status TEXT, created_at TIMESTAMPTZ)",
    # The earlier bench's table: the external ID its only index.
    "simple": "CREATE TABLE payments (stripe_charge_id TEXT NOT NULL UNIQUE, "
              "amount_cents BIGINT, currency TEXT, status TEXT, created_at TIMESTAMPTZ)",
}


def backfill_config(path, source, target_url, state_url, reports):
    path.write_text(f"""
[defaults]
timezone = "UTC"
reports = "{reports}"
state = "{state_url}"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
time_field = "created"
grace = "15m"
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


def dry_run_config(path, source, target, reports, state_url, typed):
    # Typed as every example config is: money, currency, text, timestamp,
    # the time field the window filters on (November 2026 holds every row
    # of the bench-diff files) and a 15-minute grace period.
    typing = ('fields = { amount = "money", currency = "currency", status = "text", '
              'created = "timestamp" }\ntime_field = "created"\ngrace = "15m"\n') if typed else ""
    path.write_text(f"""
[defaults]
timezone = "UTC"
reports = "{reports}"
state = "{state_url}"

[jobs.files]
{typing}compare = ["amount", "currency", "status", "created"]
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


def run(cmd, log, recon_log=None):
    if recon_log and len(cmd) > 1 and cmd[1] == "run":
        cmd = [*cmd, "--log", recon_log]
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


def backfill(recon, n, args, work, state_kind):
    print(f"backfill: {n} gaps, CSV -> PostgreSQL ({args.table} table), {state_kind} state")
    d = bench_diff.fresh_dir(work / f"backfill-{state_kind}")
    source = d / "charges.csv"
    write_source(source, n, args.table, args.seed)
    empty = d / "empty.csv"
    empty.write_text("id,amount,currency,status,created\n")
    ok = True
    for attempt in range(args.repeat):
        ok &= backfill_once(recon, n, args, d, source, empty, state_kind, attempt)
    return ok


def backfill_once(recon, n, args, d, source, empty, state_kind, attempt):
    if args.repeat > 1:
        print(f"  attempt {attempt + 1} of {args.repeat}")
    for old in ["state.db", "state.db-wal", "state.db-shm", "dry-state.db", "dry-state.db-wal",
                "dry-state.db-shm"]:
        (d / old).unlink(missing_ok=True)
    for old in ["diff", "dry", "run1", "run2", "reports"]:
        shutil.rmtree(d / old, ignore_errors=True)
    target = fresh_pg("recon_bench_target")
    psql("recon_bench_target", TABLES[args.table])
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
              d / "dry.log", args.recon_log)
    first = run([recon, "run", "--config", config, "--out", d / "run1"], d / "run1.log",
                args.recon_log)
    if diff is None or dry is None or first is None:
        return False
    planned = len((d / "dry" / "plan.jsonl").read_text().splitlines())
    s = summary(d / "run1")
    rerun = run([recon, "run", "--config", config, "--out", d / "run2"], d / "run2.log",
                args.recon_log)
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
          f"{rate:,.0f} rows/s (goal >= 100,000: {'met' if rate >= 100_000 else 'MISSED'}), "
          f"{per_gap:.0f} B per gap above the diff "
          f"(goal <= 1024: {'met' if per_gap <= 1024 else 'MISSED'})")
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
    jobs = [("typed", True)] + ([] if args.skip_untyped else [("untyped", False)])
    for kind, typed in jobs:
        dry_run_config(d / f"{kind}.toml", data / "source.csv", data / "target.csv",
                       d / "reports", f"sqlite://{d / f'{kind}-state.db'}?mode=rwc", typed)
    best = {}
    for _ in range(args.repeat):
        # The first run starts from an empty state store; the nightly run is
        # the same run again, when the history already holds every
        # discrepancy (they persist): what a scheduled dry run does each night.
        cmds = [("diff", [recon, "diff", data / "source.csv", data / "target.csv", "--key", "id",
                          "--compare", ",".join(bench_diff.COMPARED), "--out", d / "diff"])]
        for kind, _typed in jobs:
            state = d / f"{kind}-state.db"
            for suffix in ["", "-shm", "-wal"]:
                Path(f"{state}{suffix}").unlink(missing_ok=True)
            config = d / f"{kind}.toml"
            cmds += [
                (f"{kind}-first", [recon, "run", "--config", config, "--dry-run",
                                   "--out", d / f"{kind}-first"]),
                (f"{kind}-nightly", [recon, "run", "--config", config, "--dry-run",
                                     "--out", d / f"{kind}-nightly"]),
            ]
        for name, cmd in cmds:
            r = run(cmd, d / f"{name}.log", args.recon_log)
            if r is None:
                return False
            best.setdefault(name, []).append(r)
    a = summary(d / "diff")
    same = True
    times = lambda name: ", ".join(f"{w:.2f}" for w, _ in best[name])  # noqa: E731
    fastest = {name: min(rs) for name, rs in best.items()}
    print(f"  recon diff:          {fastest['diff'][0]:.2f} s, {fastest['diff'][1]:.0f} MiB "
          f"(runs: {times('diff')} s)")
    for kind, typed in jobs:
        for run_name, label in [("first", "first run"), ("nightly", "nightly run")]:
            name = f"{kind}-{run_name}"
            b = summary(d / name)
            ok = all(a.get(k) == b.get(k) for k in COUNTS)
            same &= ok
            ratio = fastest[name][0] / fastest["diff"][0]
            goal = (f"goal <= 1.2: {'met' if ratio <= 1.2 else 'MISSED'}" if typed
                    else "untyped job, no goal")
            print(f"  recon run --dry-run, {kind} {label + ':':12} {fastest[name][0]:.2f} s, "
                  f"{fastest[name][1]:.0f} MiB, time ratio {ratio:.2f} ({goal}), "
                  f"counts {'IDENTICAL' if ok else 'DIFFER'} (runs: {times(name)} s)")
            # The fastest of each against the fastest of the other may come
            # from different minutes of a host whose speed drifts; each
            # repetition runs diff and the runs back to back, so its own
            # ratio compares them under the same conditions.
            if args.repeat > 1:
                paired = sorted(r[0] / d[0] for r, d in zip(best[name], best["diff"]))
                print(f"{'':24}each repetition's own ratio: median {statistics.median(paired):.2f} "
                      f"(range {paired[0]:.2f}-{paired[-1]:.2f})"
                      + (f" (goal <= 1.2: {'met' if statistics.median(paired) <= 1.2 else 'MISSED'})"
                         if typed else ""))
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
    p.add_argument("--skip-untyped", action="store_true",
                   help="measure only the typed file dry runs")
    p.add_argument("--table", choices=sorted(TABLES), default="realistic",
                   help="the backfill's target table (simple: the earlier bench's)")
    p.add_argument("--recon-log", metavar="LEVEL",
                   help="pass --log LEVEL to each `recon run` (its log in target/bench-run)")
    args = p.parse_args()
    work = REPO / "target" / "bench-run"
    work.mkdir(parents=True, exist_ok=True)
    ok = True
    if not args.skip_backfill:
        for kind in args.state:
            ok &= backfill(args.recon, args.gaps, args, work, kind)
    for n in args.rows:
        ok &= dry_run(args.recon, n, args, work)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
