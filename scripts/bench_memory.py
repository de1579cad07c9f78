"""Peak memory of `recon diff` when one side is far larger than the other.

recon keeps the source side in a compact index and streams the target past
it; records found on one side only (gaps, orphans) must be kept no larger
than that index would hold them. This script generates one CSV of N rows
(id,amount,currency,status,created; cached under target/bench-data/memory/)
and a one-row CSV holding its first row, then measures the peak RSS of three
`recon diff` runs, each as its own process (see bench_diff.measure):

  1 row vs N     (every target record is an orphan)
  N vs 1 row     (every source record is a gap)
  N vs N         (identical files)

It prints the three figures and exits 1 unless each of the first two is at
most the third. No DuckDB is needed.

Run it through scripts/bench-memory.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_diff import COMPARED, NOV_2026, NOV_SECONDS, fresh_dir, measure, rel, tail  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
GENERATOR_VERSION = 1


def generate(n, out_dir):
    """Write big.csv (n rows) and one.csv (its first row) into out_dir, unless cached."""
    done = out_dir / f"done-v{GENERATOR_VERSION}"
    if done.exists():
        print(f"data: reusing {rel(out_dir)}")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    currencies = ("usd", "eur", "gbp", "jpy")
    statuses = ("succeeded",) * 9 + ("pending",)
    header = ",".join(["id"] + COMPARED) + "\n"
    with open(out_dir / "big.csv", "w") as big, open(out_dir / "one.csv", "w") as one:
        big.write(header)
        one.write(header)
        chunk = []
        for i in range(n):
            # A cheap deterministic scramble keeps ids and values varied.
            h = (i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
            row = (f"ch_{h:016x}{i:08x},{1 + h % 1000000},{currencies[h >> 8 & 3]},"
                   f"{statuses[(h >> 16) % 10]},{NOV_2026 + (h >> 24) % NOV_SECONDS}\n")
            if i == 0:
                one.write(row)
            chunk.append(row)
            if len(chunk) == 100000:
                big.write("".join(chunk))
                chunk.clear()
        big.write("".join(chunk))
    done.touch()
    print(f"data: generated {rel(out_dir)} ({(out_dir / 'big.csv').stat().st_size / 2**20:.0f} MiB)")


def run(recon, source, target, out_dir):
    cmd = [str(recon), "diff", str(source), str(target),
           "--key", "id", "--compare", ",".join(COMPARED), "--out", str(out_dir)]
    code, wall, rss = measure(cmd, out_dir.parent / (out_dir.name + ".log"))
    if code not in (0, 1):
        print(f"recon failed with exit code {code}: {' '.join(cmd)}")
        print(tail(out_dir.parent / (out_dir.name + ".log")))
        return None
    return wall, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n")[1:]))
    parser.add_argument("--rows", type=int, default=5_000_000, metavar="N",
                        help="rows of the large file (default: 5000000)")
    parser.add_argument("--recon", type=Path, default=REPO / "target/release/recon",
                        help="recon binary (default: target/release/recon)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "target/bench-data/memory",
                        help="generated data cache (default: target/bench-data/memory)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "target/bench-out/memory",
                        help="where recon writes its reports (default: target/bench-out/memory)")
    args = parser.parse_args()
    if not (args.recon.is_file() and os.access(args.recon, os.X_OK)):
        print(f"recon binary not found or not executable: {args.recon}\n"
              f"build it (cargo build --release --bin recon) or pass --recon PATH", file=sys.stderr)
        return 2

    n = args.rows
    data = args.data_dir / str(n)
    generate(n, data)
    big, one = data / "big.csv", data / "one.csv"
    cases = [(f"1 vs {n}", one, big, "one-vs-big"),
             (f"{n} vs 1", big, one, "big-vs-one"),
             (f"{n} vs {n}", big, big, "big-vs-big")]
    results = {}
    for label, source, target, name in cases:
        result = run(args.recon, source, target, fresh_dir(args.out_dir / name))
        if result is None:
            return 1
        results[name] = result
        print(f"  {label:>22}: {result[0]:6.2f} s, peak RSS {result[1]:6.0f} MiB")
    bound = results["big-vs-big"][1]
    ok = all(results[k][1] <= bound for k in ("one-vs-big", "big-vs-one"))
    print(f"peak RSS: 1 vs N {results['one-vs-big'][1]:.0f} MiB, N vs 1 {results['big-vs-one'][1]:.0f} MiB, "
          f"N vs N {bound:.0f} MiB: {'OK' if ok else 'FAIL'} (each of the first two <= the third)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
