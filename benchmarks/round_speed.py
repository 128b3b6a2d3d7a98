"""Standing speed benchmark: one FedAvg round, 20 clients, MNIST (52k training samples, Dirichlet
0.1), McMahan's conv32-conv64-fc512 CNN, batch 50, 5 local epochs, SGD; once per executor.

Prints for each executor the seconds per round, samples/s, the achieved FLOP rate as a share of the
machine's peak (cores x clock x FLOP per cycle from the CPU's vector units, or the GPU's dense FP32
rate), and the ratio to the sequential executor. The training FLOPs per sample are counted by
torch.utils.flop_counter on one forward + backward pass of the model.

Each executor runs in every precision of ``--precisions`` (fp32; bf16: autocast of forward and loss with fp32
weights, where the processor computes bf16: AVX512-BF16 or AMX, or a CUDA device), beside the rate of a large
matrix product in the same precision.

Usage: python benchmarks/round_speed.py [--executors sequential process batched] [--epochs 5]
       [--samples 52000] [--device cpu|cuda] [--rounds 1] [--precisions fp32 bf16]
"""
import argparse
import os
import re
import time

import torch

from fedlib.data import Dataset, federate, load_dataset
from fedlib.engine.loop import Federation
from fedlib.engine.protocol import LocalTraining
from fedlib.experiment import seed_everything
from fedlib.methods import make_method
from fedlib.models import build_model

# dense FP32 FLOP/s of GPUs this project is lent (vendor data sheets, no sparsity)
GPU_PEAK = {"H100": 67e12, "H200": 67e12, "A100": 19.5e12}


def cpu_peak() -> tuple[float, str]:
    """cores x clock x FP32 FLOP per cycle (two FMA units: 32 with AVX2, 64 with AVX-512)."""
    text = open("/proc/cpuinfo").read()
    mhz = max(float(v) for v in re.findall(r"cpu MHz\s*:\s*([\d.]+)", text))
    flags = set(re.search(r"flags\s*:\s*(.*)", text).group(1).split())
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 16 if "avx" in flags else 8
    cores = len(os.sched_getaffinity(0))
    return cores * mhz * 1e6 * per_cycle, f"{cores} cores x {mhz / 1000:.2f} GHz x {per_cycle} FLOP/cycle"


def gpu_peak(device: str) -> tuple[float, str]:
    name = torch.cuda.get_device_name(device)
    for key, value in GPU_PEAK.items():
        if key in name:
            return value, f"{name}: {value / 1e12:.1f} TFLOP/s dense FP32 (data sheet)"
    return float("nan"), f"{name}: peak unknown"


def sgemm_rate(device: str, dtype=torch.float32) -> float:
    """FLOP/s of a large matrix product (single precision by default) now, a reference for how fast this machine
    runs today (the VM's speed drifts by tens of percent over an hour)."""
    a = torch.randn(2048, 2048, device=device, dtype=dtype)
    b = torch.randn(2048, 2048, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / 5)
    return 2 * 2048 ** 3 / best


def training_flops_per_sample(model, input_shape, batch: int = 50) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(batch, *input_shape)
    y = torch.randint(0, 10, (batch,))
    probe = build_model("cnn_fedavg", input_shape, 10)
    probe.load_state_dict(model.state_dict())
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(probe(x), y).backward()
    return counter.get_total_flops() / batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--executors", nargs="+", default=["sequential", "process", "batched"])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=52_000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    args = ap.parse_args()
    from fedlib.engine.training import computes_natively

    precisions = [p for p in args.precisions if computes_natively(p, args.device)]
    for p in sorted(set(args.precisions) - set(precisions)):
        print(f"{p}: not measured: {args.device} does not compute it natively (fedlib refuses precision={p!r} "
              "there)")
    seed_everything(0)
    full = load_dataset("mnist")
    keep = torch.randperm(len(full.train_y), generator=torch.Generator().manual_seed(0))[: args.samples]
    data = Dataset("mnist52k", full.train_x[keep], full.train_y[keep], full.test_x, full.test_y, 10)
    fed = federate(data, 20, {"name": "dirichlet", "alpha": 0.1}, 0, device=args.device)
    seed_everything(0)
    model = build_model("cnn_fedavg", data.input_shape, 10)
    flops = training_flops_per_sample(model, data.input_shape)
    peak, peak_how = gpu_peak(args.device) if args.device.startswith("cuda") else cpu_peak()
    samples = int(fed.sizes.sum()) * args.epochs
    steps = sum((int(n) + 49) // 50 for n in fed.sizes) * args.epochs
    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{int(fed.sizes.sum())} samples over 20 clients (sizes {int(fed.sizes.min())}-{int(fed.sizes.max())}), "
          f"{steps} SGD steps and {samples} samples per round")
    gemm = {p: sgemm_rate(args.device, torch.bfloat16 if p == "bf16" else torch.float32) for p in precisions}
    print(f"training work {flops / 1e6:.1f} MFLOP per sample, {flops * samples / 1e12:.2f} TFLOP per round; "
          f"peak {peak / 1e9:.0f} GFLOP/s ({peak_how}), floor {flops * samples / peak:.1f} s per round; "
          "a 2048^3 matrix product runs at " + ", ".join(f"{g / 1e9:.0f} GFLOP/s in {p}" for p, g in gemm.items())
          + " now")
    reference = None
    for executor, precision in [(e, p) for p in precisions for e in args.executors]:
        federation = Federation(fed, build_model("cnn_fedavg", data.input_shape, 10).to(args.device),
                                make_method("fedavg"), seed=0, rounds=args.rounds,
                                training=LocalTraining(args.epochs, batch_size=50, lr=0.01, precision=precision),
                                progress=False, executor=executor,
                                executor_options={"workers": args.workers})
        federation.executor.run(federation.method, [])  # start worker processes outside the timing
        times = []
        for t in range(args.rounds):
            start = time.perf_counter()
            federation.run_round(t)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        dt = min(times)
        reference = reference or (dt if executor == "sequential" else None)
        ratio = f"{reference / dt:.2f}x sequential" if reference else "-"
        print(f"{precision} {executor:10s} {dt:7.1f} s per round  {samples / dt:8.0f} samples/s  "
              f"{flops * samples / dt / 1e9:6.1f} GFLOP/s = {100 * flops * samples / dt / peak:4.1f}% of peak, "
              f"{100 * flops * samples / dt / gemm[precision]:4.1f}% of the {precision} matrix product  {ratio}")


if __name__ == "__main__":
    main()
