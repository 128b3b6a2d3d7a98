"""Wall time of one config through the in-process engine and through Flower's simulation runtime (Ray).

    python benchmarks/flower_overhead.py [--method fedavg] [--dataset digits] [--clients 4] [--rounds 2]

Prints both wall times (the whole run, data loading and Ray's start included), the round-loop time the
record reports, and whether the final metrics agree."""
import argparse
import dataclasses
import time

import numpy as np

from fedlib.experiment import make_config, run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="fedavg")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cfg = make_config(method=args.method, dataset=args.dataset, partition={"name": "dirichlet", "alpha": 0.5},
                      num_clients=args.clients, rounds=args.rounds, local_epochs=1, batch_size=32, lr=0.05)
    rows = {}
    for engine in ("inprocess", "flower"):
        t0 = time.perf_counter()
        record = run(dataclasses.replace(cfg, engine=engine), cache_dir=None, progress=False)
        rows[engine] = (time.perf_counter() - t0, record["wall_time_s"], record["final"])
    print(f"{args.method} on {args.dataset}, {args.clients} clients, {args.rounds} rounds, E=1")
    for engine, (wall, loop, _) in rows.items():
        print(f"  {engine:10s} whole run {wall:7.1f} s   round loop {loop:7.1f} s ({loop / args.rounds:.2f} s/round)")
    a, b = rows["inprocess"][2], rows["flower"][2]
    gap = max(abs(a[k] - b[k]) for k in a if isinstance(a[k], float) and k != "elapsed_s")
    print(f"  largest difference of a final metric: {gap:.2e}"
          + (" (agree)" if np.isfinite(gap) and gap < 1e-5 else ""))


if __name__ == "__main__":
    main()
