"""Benchmark `recon diff` against DuckDB doing the same diff.

For each row count N this script
  1. generates (or reuses from target/bench-data/N/seed-S/) two CSVs,
     source.csv and target.csv (id,amount,currency,status,created), where the
     target is the source with 1% of ids removed (gaps), 1% new ids added
     (orphans), 1% of the remaining rows' amount changed (mismatches) and 0.1%
     of ids present twice (duplicates), shuffled;
  2. runs `recon diff` and a DuckDB diff of the same files, each as its own
     process (forked by a tiny launcher so that this script's memory does not
     leak into the numbers), measuring wall-clock time and peak RSS (os.wait4's
     ru_maxrss) of that process alone. With --repeat, the tools take turns
     (recon, DuckDB, then DuckDB, recon, ...); the best time of each is
     compared, and the ratio of each turn is printed beside it. The DuckDB process is a Python
     interpreter, so its RSS includes Python and the duckdb module (~60 MiB);
  3. checks that both found the same gaps, orphans, (id, field) mismatches and
     (id, side) duplicates, and that recon's summary.json counts agree.

Targets, at 10M rows: recon's time <= 0.3x DuckDB's, its peak RSS <= 0.15x
DuckDB's (issue "Speed as users configure it"; the first targets were 0.5x
and 0.25x). The exit status is non-zero when the results differ or a run fails;
missed targets are reported but do not change the exit status.

Classification (recon's rule, reproduced in DuckDB): an id that appears more
than once on either side is a `duplicate` only; gaps, orphans and mismatches
exclude such ids.

Run it through scripts/bench-diff, which sets up a venv with DuckDB.
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLUMNS = ["id", "amount", "currency", "status", "created"]
COMPARED = ["amount", "currency", "status", "created"]
CSV_TYPES = "{'id': 'VARCHAR', 'amount': 'BIGINT', 'currency': 'VARCHAR', 'status': 'VARCHAR', 'created': 'BIGINT'}"
NOV_2026 = 1793491200  # 2026-11-01T00:00:00Z
NOV_SECONDS = 30 * 86400
GENERATOR_VERSION = 1  # bump when the generated data changes, to invalidate caches
TIME_TARGET = 0.3
RSS_TARGET = 0.15


# --------------------------------------------------------------------------
# Data generation
# --------------------------------------------------------------------------

def class_sizes(n):
    """How many source rows fall into each discrepancy class."""
    gaps = n // 100
    duplicates = n // 1000
    mismatches = (n - gaps) // 100
    orphans = n // 100
    return {"gaps": gaps, "orphans": orphans, "mismatches": mismatches, "duplicates": duplicates}


def generate(n, seed, out_dir):
    """Write source.csv and target.csv into out_dir with DuckDB.

    All randomness comes from DuckDB's hash() of (row number, seed, purpose),
    so the data depends only on n and seed. Rows 0..n-1 are the source; rows
    n.. are the orphans, found only in the target. Source rows are put in a
    random order (rank r) and the classes are taken as disjoint rank ranges:
    gaps, then duplicates, then mismatches; the rest are identical.
    """
    import duckdb

    sizes = class_sizes(n)
    g, d, m = sizes["gaps"], sizes["duplicates"], sizes["mismatches"]
    total = n + sizes["orphans"]
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"""
        CREATE TABLE base AS
        SELECT i,
               'ch_' || md5(i::VARCHAR || '/' || {seed})[1:24] AS id,
               (1 + hash(i, {seed}, 'amount') % 1000000)::BIGINT AS amount,
               ['usd', 'eur', 'gbp', 'jpy'][1 + (hash(i, {seed}, 'currency') % 4)::INT] AS currency,
               CASE WHEN hash(i, {seed}, 'status') % 100 < 90 THEN 'succeeded'
                    WHEN hash(i, {seed}, 'status') % 100 < 96 THEN 'pending'
                    ELSE 'failed' END AS status,
               ({NOV_2026} + hash(i, {seed}, 'created') % {NOV_SECONDS})::BIGINT AS created
        FROM range({total}) t(i)
    """)
    unique = con.execute("SELECT count(DISTINCT id) = count(*) FROM base").fetchone()[0]
    if not unique:  # 96-bit ids: practically never; pick another seed if it happens
        sys.exit(f"generated ids are not unique for n={n} seed={seed}; try another --seed")

    con.execute(f"""
        CREATE TABLE src AS
        SELECT *, CASE WHEN r < {g} THEN 'gap'
                       WHEN r < {g + d} THEN 'duplicate'
                       WHEN r < {g + d + m} THEN 'mismatch'
                       ELSE 'same' END AS class
        FROM (SELECT *, row_number() OVER (ORDER BY hash(i, {seed}, 'class'), i) - 1 AS r
              FROM base WHERE i < {n})
    """)
    con.execute(f"COPY (SELECT {', '.join(COLUMNS)} FROM src ORDER BY i) "
                f"TO '{tmp / 'source.csv'}' (HEADER)")
    # A changed amount stays in 1..1_000_000 and always differs from the original.
    new_amount = f"1 + (amount - 1 + 1 + hash(i, {seed}, 'new_amount') % 999999) % 1000000"
    con.execute(f"""
        COPY (
            SELECT id, amount, currency, status, created FROM (
                SELECT i, 0 AS copy, id,
                       CASE WHEN class = 'mismatch' THEN {new_amount} ELSE amount END AS amount,
                       currency, status, created
                FROM src WHERE class <> 'gap'
                UNION ALL
                SELECT i, 1, id, amount, currency, status, created FROM src WHERE class = 'duplicate'
                UNION ALL
                SELECT i, 0, id, amount, currency, status, created FROM base WHERE i >= {n}
            )
            ORDER BY hash(i, copy, {seed}, 'shuffle'), i, copy
        ) TO '{tmp / 'target.csv'}' (HEADER)
    """)
    con.close()

    meta = {"rows": n, "seed": seed, "generator_version": GENERATOR_VERSION, "expected": sizes}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def dataset(n, seed, data_root):
    """Return (dir, meta) for N rows, generating the files unless cached."""
    out_dir = data_root / str(n) / f"seed-{seed}"
    meta_path = out_dir / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("generator_version") == GENERATOR_VERSION:
            print(f"  data: reusing {rel(out_dir)}")
            return out_dir, meta
    start = time.monotonic()
    generate(n, seed, out_dir)
    size = sum((out_dir / f).stat().st_size for f in ("source.csv", "target.csv"))
    print(f"  data: generated {rel(out_dir)} in {time.monotonic() - start:.1f} s "
          f"({size / 2**20:.0f} MiB)")
    return out_dir, json.loads(meta_path.read_text())


# --------------------------------------------------------------------------
# The DuckDB diff (runs in its own process: bench_diff.py --duckdb-worker ...)
# --------------------------------------------------------------------------

def duckdb_diff(source, target, out_dir):
    """Diff two CSVs with DuckDB, writing the result CSVs and counts.json.

    Each side is read once and grouped by id (count + the compared fields),
    then the two are full-outer-joined; only the discrepant ids are kept.
    """
    import duckdb

    def side(path):
        fields = ", ".join(f"any_value({c}) AS {c}" for c in COMPARED)
        return (f"SELECT id, count(*) AS n, {fields} "
                f"FROM read_csv('{path}', header = true, columns = {CSV_TYPES}) GROUP BY id")

    differs = " OR ".join(f"s.{c} IS DISTINCT FROM t.{c}" for c in COMPARED)
    con = duckdb.connect()
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    con.execute(f"""
        CREATE TABLE d AS
        SELECT coalesce(s.id, t.id) AS id, s.n AS sn, t.n AS tn,
               {', '.join(f's.{c} AS s_{c}, t.{c} AS t_{c}' for c in COMPARED)}
        FROM ({side(source)}) s FULL OUTER JOIN ({side(target)}) t ON s.id = t.id
        WHERE s.n IS DISTINCT FROM 1 OR t.n IS DISTINCT FROM 1 OR {differs}
    """)
    mismatches = " UNION ALL ".join(
        f"SELECT id AS external_id, '{c}' AS field, s_{c}::VARCHAR AS source_value, "
        f"t_{c}::VARCHAR AS target_value FROM d WHERE sn = 1 AND tn = 1 "
        f"AND s_{c} IS DISTINCT FROM t_{c}"
        for c in COMPARED)
    queries = {
        "gaps": "SELECT id AS external_id FROM d WHERE sn = 1 AND tn IS NULL",
        "orphans": "SELECT id AS external_id FROM d WHERE tn = 1 AND sn IS NULL",
        "mismatches": mismatches,
        "duplicates": "SELECT id AS external_id, 'source' AS side, sn AS count FROM d WHERE sn > 1 "
                      "UNION ALL "
                      "SELECT id, 'target', tn FROM d WHERE tn > 1",
    }
    for name, query in queries.items():
        con.execute(f"COPY ({query}) TO '{out_dir / (name + '.csv')}' (HEADER)")
    counts = {name: con.execute(f"SELECT count(DISTINCT external_id) FROM ({query})").fetchone()[0]
              for name, query in queries.items()}
    counts["threads"] = threads
    counts["duckdb_version"] = duckdb.__version__
    (out_dir / "counts.json").write_text(json.dumps(counts, indent=2) + "\n")


# --------------------------------------------------------------------------
# Running and measuring
# --------------------------------------------------------------------------

# A child's ru_maxrss starts at its parent's RSS at the time of fork/exec, and
# this script may have grown large (DuckDB data generation). So each measured
# command is started by a fresh, tiny launcher, which forks and execs it and
# reports the wall time and wait4 rusage (the floor is a few MiB; /bin/true
# shows about 6 MiB).
LAUNCHER = r"""
import json, os, sys, time
start = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.monotonic() - start
with open(sys.argv[1], "w") as f:
    json.dump({"code": os.waitstatus_to_exitcode(status), "wall": wall,
               "maxrss_kib": usage.ru_maxrss}, f)  # ru_maxrss is KiB on Linux
"""


def measure(cmd, log_path, cwd=None):
    """Run cmd; return (exit code, wall seconds, peak RSS in MiB) of that command alone."""
    result_path = Path(str(log_path) + ".rusage.json")
    result_path.unlink(missing_ok=True)
    with open(log_path, "wb") as log:
        launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(result_path)]
        subprocess.run(launcher + [str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    result = json.loads(result_path.read_text())
    return result["code"], result["wall"], result["maxrss_kib"] / 1024


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def tail(path, lines=15):
    text = Path(path).read_text(errors="replace").splitlines()
    return "\n".join("    | " + line for line in text[-lines:])


def run_recon(recon, data, out_dir):
    cmd = [str(recon), "diff", str(data / "source.csv"), str(data / "target.csv"),
           "--key", "id", "--compare", ",".join(COMPARED), "--out", str(out_dir)]
    code, wall, rss = measure(cmd, out_dir.parent / "recon.log")
    if code not in (0, 1):  # 1 = discrepancies found (expected), 2 = failure
        print(f"  recon failed with exit code {code}: {' '.join(cmd)}")
        print(tail(out_dir.parent / "recon.log"))
        return None
    return wall, rss


def run_duckdb(data, out_dir):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--duckdb-worker",
           str(data / "source.csv"), str(data / "target.csv"), str(out_dir)]
    # cwd=out_dir so any DuckDB spill files land there
    code, wall, rss = measure(cmd, out_dir.parent / "duckdb.log", cwd=out_dir)
    if code != 0:
        print(f"  duckdb failed with exit code {code}")
        print(tail(out_dir.parent / "duckdb.log"))
        return None
    return wall, rss


# --------------------------------------------------------------------------
# Comparing results
# --------------------------------------------------------------------------

def read_rows(path, columns):
    """Rows of a CSV as a list of tuples of the named columns."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; header is {reader.fieldnames}")
        return [tuple(row[c] for c in columns) for row in reader]


RESULT_KEYS = {  # file -> columns that identify one result
    "gaps": ["external_id"],
    "orphans": ["external_id"],
    "mismatches": ["external_id", "field"],
    "duplicates": ["external_id", "side"],
}


def read_results(out_dir):
    """{class: set of keys} from a directory of result CSVs."""
    results = {}
    for name, columns in RESULT_KEYS.items():
        rows = read_rows(out_dir / f"{name}.csv", columns)
        results[name] = {row if len(row) > 1 else row[0] for row in rows}
    return results


def find_int(obj, key):
    """The first integer stored under `key` in nested JSON (recon's summary.json)."""
    if isinstance(obj, dict):
        if isinstance(obj.get(key), int) and not isinstance(obj.get(key), bool):
            return obj[key]
        values = obj.values()
    elif isinstance(obj, list):
        values = obj
    else:
        return None
    for value in values:
        found = find_int(value, key)
        if found is not None:
            return found
    return None


def distinct_ids(keys):
    return {k[0] if isinstance(k, tuple) else k for k in keys}


def compare(recon_dir, duck_dir, expected):
    """Return a list of problem descriptions (empty = MATCH)."""
    problems = []
    try:
        recon = read_results(recon_dir)
        summary = json.loads((recon_dir / "summary.json").read_text())
    except (OSError, ValueError) as e:
        return [f"cannot read recon's results: {e}"]
    duck = read_results(duck_dir)
    duck_counts = json.loads((duck_dir / "counts.json").read_text())

    for name in RESULT_KEYS:
        only_recon = recon[name] - duck[name]
        only_duck = duck[name] - recon[name]
        if only_recon or only_duck:
            problems.append(
                f"{name}: recon {len(recon[name])}, duckdb {len(duck[name])}; "
                f"only in recon {len(only_recon)} e.g. {sorted(only_recon)[:3]}, "
                f"only in duckdb {len(only_duck)} e.g. {sorted(only_duck)[:3]}")
        got = find_int(summary, name)
        if got != duck_counts[name]:
            problems.append(f"summary.json {name} = {got}, duckdb counts {duck_counts[name]} distinct ids")
        # Sanity check of the generator and the DuckDB query against what was planted.
        if len(distinct_ids(duck[name])) != expected[name]:
            problems.append(f"duckdb found {len(distinct_ids(duck[name]))} {name} ids, "
                            f"the generator planted {expected[name]}")
    return problems


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def rel(path):
    try:
        return Path(path).resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def bench(n, args):
    print(f"rows={n}")
    data, meta = dataset(n, args.seed, args.data_dir)
    out_root = args.out_dir / str(n)
    # The tools take turns, in alternating order, so that a slow spell of a
    # shared machine falls on both rather than on all the runs of one (the
    # runs were five of recon, then five of DuckDB, and the verdict moved
    # with whichever the spell hit).
    tools = {"recon": lambda d: run_recon(args.recon, data, d),
             "duckdb": lambda d: run_duckdb(data, d)}
    walls = {tool: [] for tool in tools}
    rsss = {tool: [] for tool in tools}
    for i in range(args.repeat):
        for tool in (list(tools) if i % 2 == 0 else list(tools)[::-1]):
            result = tools[tool](fresh_dir(out_root / tool))
            if result is None:
                return None
            walls[tool].append(result[0])
            rsss[tool].append(result[1])
    best = {tool: (min(walls[tool]), max(rsss[tool])) for tool in tools}
    for tool in tools:
        print(f"  {tool}: " + ", ".join(f"{w:.2f} s" for w in walls[tool])
              + f"; peak RSS {max(rsss[tool]):.0f} MiB")
    pairs = [r / d for r, d in zip(walls["recon"], walls["duckdb"])]
    print("  time ratio of each turn: " + ", ".join(f"{x:.2f}" for x in pairs))

    problems = compare(out_root / "recon", out_root / "duckdb", meta["expected"])
    (rt, rr), (dt, dr) = best["recon"], best["duckdb"]
    time_ratio, rss_ratio = rt / dt, rr / dr
    line = (f"rows={n}  recon: {rt:.1f} s, {rr:.0f} MiB   duckdb: {dt:.1f} s, {dr:.0f} MiB   "
            f"time ratio {time_ratio:.2f} (target <= {TIME_TARGET}: "
            f"{'met' if time_ratio <= TIME_TARGET else 'MISSED'})   "
            f"rss ratio {rss_ratio:.2f} (target <= {RSS_TARGET}: "
            f"{'met' if rss_ratio <= RSS_TARGET else 'MISSED'})   "
            f"results: {'MATCH' if not problems else 'DIFFER'}")
    print("  " + line)
    for p in problems:
        print("    - " + p)
    return line, not problems


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--duckdb-worker":
        duckdb_diff(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n")[1:]))
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000], metavar="N",
                        help="row counts of the source file (default: 1000000)")
    parser.add_argument("--recon", type=Path, default=REPO / "target/release/recon",
                        help="recon binary (default: target/release/recon)")
    parser.add_argument("--seed", type=int, default=42, help="data generation seed (default: 42)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per tool; reports the best time and the highest RSS (default: 1)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "target/bench-data",
                        help="generated data cache (default: target/bench-data)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "target/bench-out",
                        help="where both tools write their results (default: target/bench-out)")
    args = parser.parse_args()

    if not (args.recon.is_file() and os.access(args.recon, os.X_OK)):
        print(f"recon binary not found or not executable: {args.recon}\n"
              f"build it (cargo build --release --bin recon) or pass --recon PATH", file=sys.stderr)
        return 2
    import duckdb

    threads = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    print(f"cores: {os.cpu_count()} (usable: {len(os.sched_getaffinity(0))}); "
          f"duckdb {duckdb.__version__} with its default threads ({threads}); recon: {rel(args.recon)}")
    lines, ok = [], True
    for n in args.rows:
        result = bench(n, args)
        if result is None:
            ok = False
            lines.append(f"rows={n}  FAILED (see above)")
            continue
        lines.append(result[0])
        ok = ok and result[1]
    print()
    for line in lines:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
