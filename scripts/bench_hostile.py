"""Peak memory, time and message size of `recon diff` on hostile files.

Three files that once took recon's memory without bound (issue: "memory
without bound on hostile files"), each diffed against a small valid file as
its own process (see bench_diff.measure):

  no-line-end   a header, then SIZE bytes without a line end
  one-big-row   a header, one data row whose amount field is SIZE bytes
  wide-header   a header of 1,000,000 columns without the key column

Each run must exit 2, name the file and the line (and max_record_bytes for
the first two), keep stderr under 2 KiB, stay under 200 MiB peak RSS and
30 s. The script prints each figure against its bound and exits 1 if any
is over. Files are cached under target/bench-data/hostile/.

Run it through scripts/bench-hostile.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_diff import fresh_dir, measure, rel  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MAX_RSS_MIB = 200
MAX_SECONDS = 30
MAX_STDERR = 2048


def write_repeated(f, byte, size):
    block = byte * (1 << 20)
    left = size
    while left > 0:
        n = min(left, len(block))
        f.write(block[:n])
        left -= n


def generate(out_dir, size):
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    path = out_dir / f"no-line-end-{size}.csv"
    if not path.exists():
        with open(path, "wb") as f:
            f.write(b"id,amount,currency\n")
            write_repeated(f, b"x", size)
    files["no-line-end"] = path
    path = out_dir / f"one-big-row-{size}.csv"
    if not path.exists():
        with open(path, "wb") as f:
            f.write(b"id,amount,currency\nch_1,")
            write_repeated(f, b"9", size)
            f.write(b",usd\n")
    files["one-big-row"] = path
    path = out_dir / "wide-header.csv"
    if not path.exists():
        with open(path, "w") as f:
            f.write(",".join(f"column_{i}" for i in range(1_000_000)) + "\n")
    files["wide-header"] = path
    small = out_dir / "small.csv"
    small.write_text("id,amount,currency\nch_1,100,usd\n")
    return files, small


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recon", default=str(REPO / "target/release/recon"))
    p.add_argument("--size", type=int, default=2 << 30, help="bytes of the long record (default 2 GiB)")
    args = p.parse_args()
    data = REPO / "target/bench-data/hostile"
    files, small = generate(data, args.size)
    work = fresh_dir(REPO / "target/bench-hostile")
    failed = False
    for name, path in files.items():
        log = work / f"{name}.log"
        cmd = [args.recon, "diff", str(path), str(small), "--key", "id", "--compare", "amount,currency",
               "--out", str(work / name)]
        code, wall, rss = measure(cmd, log)
        stderr = log.read_bytes()
        text = stderr.decode(errors="replace")
        checks = {
            "exit 2": code == 2,
            "names the file": path.name in text,
            "names the line": "line " in text,
            f"stderr <= {MAX_STDERR} B": len(stderr) <= MAX_STDERR,
            f"peak <= {MAX_RSS_MIB} MiB": rss <= MAX_RSS_MIB,
            f"time <= {MAX_SECONDS} s": wall <= MAX_SECONDS,
        }
        if name != "wide-header":
            checks["names max_record_bytes"] = "max_record_bytes" in text
        bad = [k for k, ok in checks.items() if not ok]
        failed |= bool(bad)
        size = path.stat().st_size / 2**20
        print(f"{name:12} {size:8.0f} MiB file: exit {code}, {wall:.2f} s, {rss:.0f} MiB peak, "
              f"stderr {len(stderr)} B -> {'OK' if not bad else 'FAIL: ' + ', '.join(bad)}")
        print(f"    | {text.strip()[:300]}")
    print(f"data: {rel(data)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
