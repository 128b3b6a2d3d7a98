"""Standing speed benchmark: one FedAvg round, 20 clients, MNIST (52k training samples,
Dirichlet 0.1), McMahan's conv32-conv64-fc512 CNN, batch 50, 5 local epochs, SGD.

Target: < 30 s per round on a 2-core CPU (a sequential PFL library needs ~86 s).
Usage: python benchmarks/round_speed.py [--rounds 1] [--epochs 5] [--device cpu]
"""
import argparse
import time

import torch

from fedlib.data import Dataset, federate, load_dataset
from fedlib.engine.loop import Federation
from fedlib.experiment import seed_everything
from fedlib.methods import make_method
from fedlib.models import build_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=52_000)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    seed_everything(0)
    full = load_dataset("mnist")
    keep = torch.randperm(len(full.train_y), generator=torch.Generator().manual_seed(0))[: args.samples]
    data = Dataset("mnist52k", full.train_x[keep], full.train_y[keep], full.test_x, full.test_y, 10)
    fed = federate(data, 20, {"name": "dirichlet", "alpha": 0.1}, 0, device=args.device)
    model = build_model("cnn_fedavg", data.input_shape, 10).to(args.device)
    federation = Federation(fed, model, make_method("fedavg"), seed=0, rounds=args.rounds, local_epochs=args.epochs,
                            batch_size=50, lr=0.01, progress=False)
    steps = sum((int(n) + 49) // 50 for n in fed.sizes) * args.epochs
    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{int(fed.sizes.sum())} samples over 20 clients, {steps} SGD steps per round")
    for t in range(args.rounds):
        start = time.perf_counter()
        federation.run_round(t)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = time.perf_counter() - start
        print(f"round {t + 1}: {dt:.1f} s  ({int(fed.sizes.sum()) * args.epochs / dt:.0f} samples/s)  "
              f"target < 30 s; reference sequential library ~86 s")


if __name__ == "__main__":
    main()
