#!/usr/bin/env python3
"""Benchmark `backfill.via = "webhook"` (issue 14).

Delivers N gaps (default 5,000) through `recon run` to a webhook handler on
127.0.0.1 that answers after a fixed latency (default 50 ms), deduplicates by
Idempotency-Key (409 for a key it has processed) and creates each record in
the SQLite target, with the job's `rate_limit` at R per second (default 100).
The rate limit bounds the wall time from below at N / R seconds (50 s); with
50 ms per answer, more than R x latency = 5 deliveries must be in flight to
reach it (the job's `concurrency`, default 16 here).

Prints the wall time of the run against that bound, the requests the handler
received, the records it created, and the duplicates: keys it was asked to
process again after it had (answered 409), and keys created more than once
(must be 0).

Standard library only (http.server, sqlite3); the recon binary is
target/debug/recon unless --recon says otherwise.
"""

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    done = set()
    requests = 0
    created = {}
    conflicts = 0
    db = None
    latency = 0.05

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        key = self.headers.get("Idempotency-Key")
        time.sleep(Handler.latency)
        with Handler.lock:
            Handler.requests += 1
            if key in Handler.done:
                Handler.conflicts += 1
                status, text = 409, b"already processed"
            else:
                Handler.done.add(key)
                obj = json.loads(body)
                Handler.db.execute(
                    "INSERT INTO payments VALUES (?, ?, ?, ?, ?)",
                    (obj["id"], obj["amount"], obj["currency"], obj["status"],
                     obj["created"].replace("T", " ").rstrip("Z")),
                )
                Handler.db.commit()
                Handler.created[key] = Handler.created.get(key, 0) + 1
                status, text = 200, b'{"received":true}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gaps", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=100, help="rate_limit per second")
    ap.add_argument("--latency-ms", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--recon", default=os.path.join(ROOT, "target", "debug", "recon"))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="bench-webhook-")
    target = os.path.join(work, "target.db")
    db = sqlite3.connect(target, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(
        "CREATE TABLE payments (charge_id TEXT NOT NULL UNIQUE, amount_cents INTEGER, "
        "currency TEXT, status TEXT, created_at TIMESTAMP)"
    )
    db.commit()
    Handler.db = db
    Handler.latency = args.latency_ms / 1000.0

    now = int(time.time())
    with open(os.path.join(work, "charges.csv"), "w") as f:
        f.write("id,amount,currency,status,created\n")
        for i in range(args.gaps):
            f.write(f"ch_{i:07d},{1000 + i},usd,succeeded,{now - 7200 + i % 3600}\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"

    config = os.path.join(work, "recon.toml")
    with open(config, "w") as f:
        f.write(f"""
[defaults]
reports = "{work}/reports"
state = "sqlite://{work}/state.db"

[jobs.charges]
fields = {{ amount = "money", currency = "currency", status = "text", created = "timestamp" }}
compare = ["amount", "currency", "status"]
window = "last:24h"

[jobs.charges.source]
type = "file"
path = "{work}/charges.csv"
key = "id"

[jobs.charges.target]
type = "sql"
url = "sqlite://{target}"
table = "payments"
key = "charge_id"
columns = {{ amount = "amount_cents", created = "created_at" }}

[jobs.charges.backfill]
mode = "insert"
max_records = {args.gaps}
max_ratio = 1
via = "webhook"

[jobs.charges.backfill.webhook]
url = "{url}"
rate_limit = "{args.rate}/s"
concurrency = {args.concurrency}
verify_after = "0s"
""")

    bound = args.gaps / args.rate
    print(f"bench-webhook: {args.gaps} gaps, handler latency {args.latency_ms} ms, "
          f"rate_limit {args.rate}/s, concurrency {args.concurrency}; {args.recon}")
    started = time.monotonic()
    run = subprocess.run(
        [args.recon, "run", "--config", config, "--out", os.path.join(work, "out")],
        capture_output=True, text=True,
    )
    wall = time.monotonic() - started
    if run.returncode not in (0, 1):
        print(run.stdout, run.stderr, file=sys.stderr)
        sys.exit(f"recon run exited {run.returncode}")
    with open(os.path.join(work, "out", "summary.json")) as f:
        summary = json.load(f)
    created_twice = sum(1 for n in Handler.created.values() if n > 1)
    rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT charge_id) FROM payments").fetchone()
    print(f"wall time        {wall:7.1f} s   (bound {bound:.1f} s at {args.rate}/s: ratio {wall / bound:.3f})")
    print(f"deliveries       {summary['webhook']['delivered']} delivered, "
          f"{summary['webhook']['already_done']} already done, {summary['webhook']['failed']} failed, "
          f"{summary['delivered_not_created']} delivered_not_created")
    print(f"handler          {Handler.requests} requests, {len(Handler.created)} created, "
          f"{Handler.conflicts} duplicates answered 409, {created_twice} created twice; "
          f"target rows {rows[0]} ({rows[1]} distinct)")
    print(f"recon            exit {run.returncode}, {summary['webhook']['requests']} requests, "
          f"{summary['webhook']['retries']} retries")
    server.shutdown()
    ok = (summary["webhook"]["delivered"] == args.gaps and Handler.conflicts == 0
          and created_twice == 0 and rows[0] == args.gaps)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
