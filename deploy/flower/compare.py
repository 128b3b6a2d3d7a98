"""Rehearse a deployment of each named method with loopback.sh (SuperLink and SuperNodes on 127.0.0.1, TLS and
SuperNode authentication, each node holding its own clients) and compare its record with the in-process run's.

    .venv/bin/python deploy/flower/compare.py fedavg scaffold ditto fedproto fedpac fedgpa [--nodes 2]

Prints, per method, the seconds the rehearsal took, the largest difference between the two records over every
metric of every round (per-client lists included) and the messages the deployed ServerApp audited (run config
``audit = true``: ``fedlib.flower.audit``); exits 1 if a record differs by more than 1e-5 or the audit fails.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-5
# the App's experiment (digits, 4 clients, 2 rounds) with each method's hyperparameters as tests/test_flower.py runs it
HYPER = {"fedgpa": {"mu": 0.4}}


def config(method: str, clients: int) -> dict:
    return {"method": method, "dataset": "digits", "partition": {"name": "dirichlet", "alpha": 0.5},
            "num_clients": clients, "rounds": 2, "local_epochs": 1, "batch_size": 32, "lr": 0.05,
            "hyper": HYPER.get(method, {})}


def largest_difference(a: dict, b: dict) -> float:
    """max |a - b| over the metrics of every round (elapsed time left out)."""
    worst = 0.0
    for x, y in zip(a["history"], b["history"]):
        for key in x:
            if key == "elapsed_s" or isinstance(x[key], dict):
                continue
            worst = max(worst, float(np.nanmax(np.abs(np.asarray(x[key], float) - np.asarray(y[key], float)))))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("methods", nargs="+")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    from fedlib.experiment import make_config, run

    failed = False
    print(f"{'method':10s} {'rehearsal s':>11s} {'max |diff|':>11s} {'audited':>9s}  final (deployment)")
    for method in args.methods:
        cfg = config(method, args.clients)
        started = time.time()
        out = subprocess.run([str(HERE / "loopback.sh"), str(args.nodes), str(args.clients)], capture_output=True,
                             text=True, env={**os.environ, "RUN_CONFIG": f"config='{json.dumps(cfg)}' audit=true"})
        seconds = time.time() - started
        found = re.search(r"^record: (\S+)", out.stdout, re.M)
        if out.returncode or not found:
            print(f"{method:10s} {seconds:11.0f} {'failed':>11s}  {out.stdout[-400:]}{out.stderr[-400:]}")
            failed = True
            continue
        deployed = json.loads(Path(found.group(1)).read_text())
        local = run(make_config(**cfg), cache_dir=None, progress=False)
        gap = largest_difference(local, deployed)
        audited = deployed.get("audit", {})
        failed |= not (gap <= TOLERANCE and audited.get("passed"))
        final = {k: round(v, 5) for k, v in deployed["final"].items() if k.endswith("_acc")}
        print(f"{method:10s} {seconds:11.0f} {gap:11.2e} {sum(audited.get('messages', {}).values()):9d}  {final}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
