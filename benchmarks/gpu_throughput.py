"""Throughput of the recorded grids: FedGPA's paper configuration (FMNIST, cnn2, 20 clients, E = 5,
batch 50, SGD) trained by the sequential executor, the batched executor (one run), and run-batched groups
(``fedlib.experiment.run_many``: many runs in one vmapped step); then, from the best measured rate, the
projected device time of each chapter's whole grid at ``--scale`` (paper or reference: ``python -m fedlib
records <chapter> --scale ...``). With ``--processes N`` (the CPU's way to record: N single-threaded runs at
once, one per core) the projection uses N times the sequential executor's rate on one thread, measured here.

Prints per mode: seconds per round (training and aggregation of every run in it, after a warm-up round),
training samples/s, achieved FLOP/s and its share of the device's dense FP32 peak, and the ratio to the
sequential executor. Evaluation is timed apart (one evaluation of one run) and added to the projection.

Usage: python benchmarks/gpu_throughput.py                      # on a CUDA device when visible
       python benchmarks/gpu_throughput.py --device cpu          # smaller defaults: E = 1, groups of 2 and 4
       python benchmarks/gpu_throughput.py --device cpu --modes sequential --scale reference --processes 2
       [--groups 6 18 60] [--epochs 5] [--rounds 2] [--no-projection] [--profile]
"""
import argparse
import dataclasses
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from round_speed import cpu_peak, gpu_peak, sgemm_rate

from fedlib.engine.executors import Cohort, train_cohorts
from fedlib.experiment import build, load_data, lockstep_key
from fedlib.studies import fedgpa


def flops_per_sample(cfg, data) -> float:
    """Training FLOPs (forward + backward) of one sample of the config's model, by torch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode

    from fedlib.models import build_model

    model = build_model(cfg.model, data.input_shape, data.num_classes, cfg.dataset)
    x = torch.randn(32, *data.input_shape)
    y = torch.randint(0, data.num_classes, (32,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / 32


def rate(flops: float) -> str:
    return f"{flops / 1e12:.2f} TFLOP/s" if flops >= 1e12 else f"{flops / 1e9:.1f} GFLOP/s"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def group_configs(n: int, epochs: int, device: str) -> list:
    """n runs of FedGPA's paper configuration that can share a step: settings x s x seeds, in that order."""
    out = []
    seed = 0
    while len(out) < n:
        for setting in (1, 2, 3):
            for s in (20, 80):
                if len(out) < n:
                    cfg = fedgpa.config("fedgpa", setting, s, "paper", seed=seed)
                    out.append(dataclasses.replace(cfg, local_epochs=epochs, device=device, executor="batched"))
        seed += 1
    assert len({lockstep_key(c) for c in out}) == 1
    return out


def samples_per_round(fed) -> int:
    return int(sum(len(i) for i in fed.setup.train_idx)) * fed.setup.local_epochs


def measure(mode: str, configs: list, rounds: int, device: str, profile: bool = False) -> tuple[float, int, float]:
    """(seconds per round, samples per round, seconds of one evaluation of one run) of ``mode``; ``profile``: one more
    round under torch.profiler, whose summary is printed (``print_profile``)."""
    from fedlib.engine.batched import BatchedTrainer
    from fedlib.engine.executors import BatchedExecutor
    from fedlib.methods import make_method

    data = load_data(configs[0]).to(device)
    if data.train_x.ndim == 4:
        data = dataclasses.replace(data, train_x=data.train_x.contiguous(memory_format=torch.channels_last))
    method = make_method(configs[0].method, **configs[0].hyper)
    shared: dict = {}

    def executor(setup, trainer, **_):
        if mode != "lockstep":
            return BatchedExecutor(setup, trainer) if mode == "batched" else None
        shared.setdefault("batched", BatchedTrainer.like(trainer))
        return BatchedExecutor(setup, trainer, batched=shared["batched"])

    feds = [build(dataclasses.replace(c, executor="sequential" if mode == "sequential" else "batched"),
                  executor=None if mode == "sequential" else executor, data=data, method=method) for c in configs]

    def one_round(t: int) -> None:
        if mode == "lockstep":   # Lockstep.step without its end_round (evaluation, checkpoint), as in the others
            cohorts = [Cohort(f.method, f.setup, f.trainer, f.open_round(t)) for f in feds]
            for fed, outcome in zip(feds, train_cohorts(shared["batched"], cohorts)):
                if isinstance(outcome, BaseException):
                    raise outcome
                fed.close_round(outcome)
        else:
            for fed in feds:
                fed.close_round(fed.executor.run(fed.method, fed.open_round(t)))

    times = []
    for t in range(rounds + 1):   # round 0 warms up (allocator, kernels)
        sync(device)
        start = time.perf_counter()
        one_round(t)
        sync(device)
        if t:
            times.append(time.perf_counter() - start)
    if profile:
        longest = max(len(i) for i in feds[0].setup.train_idx)   # the lockstep loop's steps: the longest client's
        print_profile(lambda: (one_round(rounds + 1), sync(device)), device,
                      configs[0].local_epochs * -(-longest // configs[0].batch_size))
    sync(device)
    start = time.perf_counter()
    feds[0].evaluate(rounds)
    sync(device)
    return min(times), sum(samples_per_round(f) for f in feds), time.perf_counter() - start


def print_profile(round_fn, device: str, steps: int) -> None:
    """One round under torch.profiler: the operators launched per lockstep step (each a kernel launch on a GPU,
    the cost that does not shrink as runs are batched), the device's busy share of the round, and the operators that
    take the most device time: what bounds a mode that stays far below the device's peak."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        round_fn()
    wall = time.perf_counter() - start
    events = prof.key_averages()
    ops = sum(e.count for e in events if e.key.startswith("aten::"))
    device_time = sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6 if cuda else 0.0
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    print(f"  profile: {wall:.2f} s round, {ops:,} aten operators (about {ops / steps:,.0f} per step of "
          f"{steps} local steps of the longest client)" + (f", {kernels:,} kernels, device busy {device_time:.2f} s = "
                                f"{100 * device_time / wall:.0f}% of the round" if cuda else ""))
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=12))


def grid_work(chapter: str, scale: str = "paper") -> tuple[int, int, float, int]:
    """(runs, evaluations, training FLOPs, training samples) of a chapter's grid at ``scale``: every client's
    share of its run's training set, times the local epochs, times the expected participants per round."""

    from fedlib.experiment.wiring import training_samples
    from fedlib.recording import recording_order
    from fedlib.studies.registry import study as chapter_study

    study = chapter_study(chapter)
    configs = recording_order(study.declared.tables(scale))
    flops, loaded = {}, {}
    samples = total = evals = 0
    for cfg in configs:
        data_key = (cfg.dataset, repr(cfg.data_options), repr(cfg.backbones), cfg.backbone_input)
        if data_key not in loaded:
            loaded[data_key] = load_data(cfg)
        model_key = (data_key, cfg.model)
        if model_key not in flops:
            flops[model_key] = flops_per_sample(cfg, loaded[data_key])
        n = training_samples(cfg)
        samples += n
        total += n * flops[model_key]
        evals += cfg.rounds // cfg.evaluation.every
    return len(configs), evals, total, int(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--groups", nargs="+", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None, help="local epochs (paper: 5)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds per mode (after one warm-up round)")
    ap.add_argument("--modes", nargs="+", default=["sequential", "batched", "lockstep"])
    ap.add_argument("--no-projection", action="store_true")
    ap.add_argument("--scale", default="paper", help="the grids to project: paper | reference")
    ap.add_argument("--processes", type=int, default=None,
                    help="project for this many single-threaded runs at once (the CPU records so)")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more round of each mode: operators per step, device busy share, top operators")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "tf32", "bf16"],
                    help="each mode in each precision the device computes natively (the projection uses fp32's)")
    args = ap.parse_args()
    from fedlib.engine.training import computes_natively, step_scope
    cuda = args.device.startswith("cuda")
    groups = args.groups or ([6, 18, 60] if cuda else [2, 4])
    epochs = args.epochs or (5 if cuda else 1)
    peak, peak_how = gpu_peak(args.device) if cuda else cpu_peak()
    probe = group_configs(1, epochs, args.device)
    per_sample = flops_per_sample(probe[0], load_data(probe[0]))
    print(
        f"device {args.device} ({torch.cuda.get_device_name(args.device) if cuda else os.cpu_count()}), torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads; "
        f"FedGPA paper configuration (FMNIST, cnn2, 20 clients, "
        f"E = {epochs}, batch 50): {per_sample / 1e6:.2f} MFLOP per training sample; peak {rate(peak)} ({peak_how})"
    )
    plan = [(m, 1) for m in args.modes if m != "lockstep"] + [
        ("lockstep", g) for g in groups if "lockstep" in args.modes
    ]
    precisions = [p for p in args.precisions if computes_natively(p, args.device)]
    skipped = sorted(set(args.precisions) - set(precisions))
    if skipped:
        print(f"not measured: {', '.join(skipped)} ({args.device} does not compute them natively)")
    best, eval_s = 0.0, None
    for precision in precisions:
        around_phase, _ = step_scope(precision, args.device.split(":")[0])
        with around_phase:   # tf32 matrix products for the reference product too
            gemm = sgemm_rate(args.device, torch.bfloat16 if precision == "bf16" else torch.float32)
        print(f"{precision}: a 2048^3 matrix product runs at {rate(gemm)} now")
        reference = None
        for mode, n in plan:
            configs = [dataclasses.replace(c, precision=precision) for c in group_configs(n, epochs, args.device)]
            dt, samples, eval_s = measure(mode, configs, args.rounds, args.device, profile=args.profile)
            speed = samples / dt
            if precision == "fp32":
                best = max(best, speed * per_sample)
            reference = reference or (speed if mode == "sequential" else None)
            ratio = f"{speed / reference:6.1f}x sequential" if reference else "-"
            label = f"{precision} {mode} ({n} run{'s' if n > 1 else ''})"
            print(f"{label:27s} {dt:8.2f} s per round  {speed:11,.0f} samples/s  {rate(speed * per_sample):>13s} = "
                  f"{100 * speed * per_sample / peak:5.1f}% of FP32 peak, {100 * speed * per_sample / gemm:5.1f}% of "
                  f"the {precision} matrix product  {ratio}", flush=True)
    print(f"one evaluation of one run: {eval_s:.2f} s")
    if args.no_projection:
        return
    how = "the best fp32 rate above"
    if args.processes:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        dt, samples, eval_s = measure("sequential", group_configs(1, epochs, args.device), args.rounds, args.device)
        torch.set_num_threads(threads)
        best = args.processes * samples / dt * per_sample
        how = (f"{args.processes} single-threaded runs at once, each at the sequential executor's one-thread rate "
               f"{samples / dt:,.0f} samples/s")
    print(f"projection of the {args.scale}-scale grids at {rate(best)} ({how}) plus {eval_s:.2f} s per evaluation "
          f"of a run (training FLOPs scaled from FedGPA's cnn2 to each chapter's models):")
    total, skipped = 0.0, []
    from fedlib.errors import DataNotFoundError
    from fedlib.studies.registry import chapters

    for chapter in chapters():
        try:
            runs, evals, flops, samples = grid_work(chapter, args.scale)
        except DataNotFoundError as exc:   # a machine without a chapter's data (an H200 had no fonts for digit4)
            print(f"  {chapter:9s} not projected: {exc}")
            skipped.append(chapter)
            continue
        seconds = flops / best + evals * eval_s / (args.processes or 1)
        total += seconds
        cpu = f" = {seconds * args.processes / 3600:6.2f} CPU-h" if args.processes else ""
        print(f"  {chapter:9s} {runs:4d} runs, {samples / 1e9:6.2f} G samples, {flops / 1e15:7.2f} PFLOP, {evals:6d} "
              f"evaluations: {seconds / 3600:6.2f} h{cpu}")
    print(f"  all {len(chapters()) - len(skipped)} projected: {total / 3600:.2f} h"
          + (f" (without {', '.join(skipped)})" if skipped else ""))


if __name__ == "__main__":
    main()
