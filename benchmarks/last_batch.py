"""What an epoch's last, partial mini-batch does to personalized accuracy (the config field ``drop_last``).

Clients of n = 61 images train with batch 10: six full steps and a last step on one image, at the full learning
rate. Ditto and FedAvg (FMNIST, 20 clients, 3 dominant classes, SGD lr 0.05, E = 1, 30 rounds, evaluated every
round) run with the last batch kept and dropped (torch's ``DataLoader(drop_last=True)``), over seeds. Prints the
final personalized accuracy (mean ± std over seeds), how much it moves from round to round over the last ten
rounds (mean absolute change of the mean over clients, points), and the largest fall of one client between the
last two evaluations (points, from each run's per-client confusions of those rounds).

Usage: python benchmarks/last_batch.py [--seeds 0 1 2] [--methods ditto fedavg] [--rounds 30]
"""
import argparse
import dataclasses

import numpy as np

from fedlib.experiment import make_config, run
from fedlib.metrics import accuracy


def client_accuracies(fed_record_rows: list) -> list:
    return [accuracy(np.asarray(c)) for c in fed_record_rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=["ditto", "fedavg"])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print("FMNIST, 20 clients of 61 images (3 dominant classes, s = 10), batch 10, SGD lr 0.05, E = 1, "
          f"{args.rounds} rounds, seeds {args.seeds}")
    for method in args.methods:
        for drop_last in (False, True):
            finals, jitters, falls = [], [], []
            for seed in args.seeds:
                cfg = make_config(method=method, dataset="fmnist", partition={"name": "skew", "s": 10, "n": 61, "k": 3},
                                  num_clients=20, rounds=args.rounds, local_epochs=1, batch_size=10, lr=0.05,
                                  eval_every=1, seed=seed, drop_last=drop_last)
                last = run(cfg, cache_dir=None, progress=False)
                before = run(dataclasses.replace(cfg, rounds=args.rounds - 1), cache_dir=None, progress=False)
                accs = [100 * h["personal_local_acc"] for h in last["history"]]
                finals.append(accs[-1])
                jitters.append(float(np.mean(np.abs(np.diff(accs[-11:])))))
                a = client_accuracies(last["final_confusions"]["personal_local"])
                b = client_accuracies(before["final_confusions"]["personal_local"])
                falls.append(100 * max(x - y for x, y in zip(b, a)))
            print(f"{method:7s} last batch {'dropped' if drop_last else 'kept   '}: final {np.mean(finals):.2f} ± "
                  f"{np.std(finals):.2f}; round-to-round change over the last 10 rounds {np.mean(jitters):.2f} "
                  f"points; largest fall of one client in the last round {np.mean(falls):.2f} points (mean over "
                  f"seeds; worst {np.max(falls):.2f})", flush=True)


if __name__ == "__main__":
    main()
