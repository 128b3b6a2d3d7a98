"""The papers' small models: the engine's training rate against a bare training loop of the same model, on the
same machine, in the same run.

For each paper configuration (FedGPA's: FMNIST, cnn2, 20 clients of 600 images, batch 50, SGD lr 0.02; pFedCSPC's
LeNet-style cnn_cspc, batch 64; ...) it times

* a **bare loop**: one model, the clients' mini-batches one after another (index into tensors already in memory,
  channels_last, forward, cross-entropy, backward, SGD step): what the kernels deliver with no federation around;
* the **engine**: one FedAvg round of ``fedlib.engine.loop.Federation`` with each CPU executor (the same samples,
  the same batches), training only (evaluation is timed apart).

Both run with the same threads (``--threads``, default 1: the records command runs one single-threaded run per
core) and the rate of two processes at once is what a two-core machine records. Prints samples/s, the achieved
GFLOP/s, the share of a 2048^3 SGEMM's rate measured in the same run, and engine / bare.

Each runs in every precision of ``--precisions`` (fp32, bf16: autocast of forward and loss, fp32 weights), the
share of the SGEMM rate in the same precision; bf16 is skipped, with the reason, on a processor without bf16
instructions (where PyTorch would emulate it).

Usage: python benchmarks/small_models.py [--configs fedgpa pfedcspc standing] [--threads 1] [--epochs 1] [--repeats 3]
       [--precisions fp32 bf16]
"""
import argparse
import copy
import time

import torch

from fedlib.data import federate, load_dataset
from fedlib.engine.loop import Federation
from fedlib.engine.protocol import LocalTraining
from fedlib.experiment import seed_everything
from fedlib.methods import make_method
from fedlib.models import build_model

# name -> (dataset, model, clients, partition, batch, lr): the papers' configurations on our data
CONFIGS = {
    "fedgpa": ("fmnist", "cnn2", 20, {"name": "skew", "s": 20, "n": 600, "k": 5}, 50, 0.02),
    "fedmate": ("fmnist", "cnn2", 20, {"name": "skew", "s": 10, "n": 600, "k": 3}, 50, 0.01),
    "pfedcspc": ("fmnist", "cnn_cspc", 10, {"name": "dirichlet", "alpha": 0.5}, 64, 0.01),
    # the standing benchmark's model and partition (benchmarks/round_speed.py), on all of MNIST: its bare-loop rate
    # tells the engine's share from the kernels' on a processor whose SGEMM rate differs
    "standing": ("mnist", "cnn_fedavg", 20, {"name": "dirichlet", "alpha": 0.1}, 50, 0.01),
}


def flops_per_sample(model, shape, batch) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    probe = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(probe(torch.randn(batch, *shape)), torch.randint(0, 10, (batch,))).backward()
    return counter.get_total_flops() / batch


def sgemm_rate(dtype=torch.float32) -> float:
    a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
    for _ in range(2):
        a @ b
    start = time.perf_counter()
    for _ in range(5):
        a @ b
    return 5 * 2 * 2048 ** 3 / (time.perf_counter() - start)


def bare_loop(model, x, y, idx_per_client, batch, lr, epochs, precision="fp32") -> tuple[float, int]:
    """(seconds, samples) of plain SGD over every client's batches with one model."""
    from fedlib.engine.training import step_scope

    _, around_forward = step_scope(precision, "cpu")
    model = model.to(memory_format=torch.channels_last)
    x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(0)
    orders = [idx[torch.randperm(len(idx), generator=gen)] for idx in idx_per_client for _ in range(epochs)]
    samples = sum(len(o) for o in orders)
    start = time.perf_counter()
    for order in orders:
        for s in range(0, len(order), batch):
            i = order[s:s + batch]
            opt.zero_grad(set_to_none=True)
            with around_forward():
                loss = torch.nn.functional.cross_entropy(model(x[i]), y[i])
            loss.backward()
            opt.step()
    return time.perf_counter() - start, samples


def engine_round(fed, model, batch, lr, epochs, executor, precision="fp32") -> tuple[float, int]:
    federation = Federation(fed, copy.deepcopy(model), make_method("fedavg"), seed=0, rounds=1,
                            training=LocalTraining(epochs, batch_size=batch, lr=lr, precision=precision),
                            progress=False, executor=executor,
                            executor_options={"workers": 2})
    federation.executor.run(federation.method, [])   # worker processes start outside the timing
    tasks = federation.open_round(0)
    start = time.perf_counter()
    results = federation.executor.run(federation.method, tasks)
    elapsed = time.perf_counter() - start
    federation.close_round(results)
    federation.executor.close()
    return elapsed, int(sum(len(i) for i in federation.setup.train_idx)) * epochs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", default=["fedgpa", "pfedcspc"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--executors", nargs="+", default=["sequential", "batched"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    args = ap.parse_args()
    from fedlib.engine.training import computes_natively, cpu_model

    torch.set_num_threads(args.threads)
    precisions = [p for p in args.precisions if computes_natively(p, "cpu")]
    gemm = {p: sgemm_rate(torch.bfloat16 if p == "bf16" else torch.float32) for p in precisions}
    print(f"torch {torch.__version__}, {cpu_model()}, {args.threads} thread(s); 2048^3 matrix product now: "
          + ", ".join(f"{p} {g / 1e9:.0f} GFLOP/s" for p, g in gemm.items()))
    if "bf16" in args.precisions and "bf16" not in precisions:
        print("bf16: not measured: this processor has no bf16 instructions (AVX512-BF16 or AMX); PyTorch would "
              "emulate it, slower than fp32, and fedlib refuses precision='bf16' here")
    for name in args.configs:
        dataset, model_name, clients, partition, batch, lr = CONFIGS[name]
        data = load_dataset(dataset)
        fed = federate(data, clients, partition, 0)
        seed_everything(0)
        model = build_model(model_name, data.input_shape, 10)
        flops = flops_per_sample(model, data.input_shape, batch)
        x = data.train_x
        print(f"{name}: {model_name}, {clients} clients, batch {batch}, {flops / 1e6:.2f} MFLOP/sample, "
              f"{sum(len(i) for i in fed.train_idx) * args.epochs} samples per round")
        for precision in precisions:
            bare = min(bare_loop(copy.deepcopy(model), x, data.train_y, list(fed.train_idx), batch, lr, args.epochs,
                                 precision) for _ in range(args.repeats))
            base = bare[1] / bare[0]
            print(f"  {precision} {'bare loop':22s} {base:9,.0f} samples/s  {base * flops / 1e9:6.1f} GFLOP/s "
                  f"({100 * base * flops / gemm[precision]:4.1f}% of the {precision} matrix product)")
            for executor in args.executors:
                dt, n = min((engine_round(fed, model, batch, lr, args.epochs, executor, precision)
                             for _ in range(args.repeats)), key=lambda r: r[0])
                rate = n / dt
                print(f"  {precision} {'engine, ' + executor:22s} {rate:9,.0f} samples/s  {rate * flops / 1e9:6.1f} "
                      f"GFLOP/s ({100 * rate * flops / gemm[precision]:4.1f}% of the {precision} matrix product)  "
                      f"{100 * rate / base:5.1f}% of the bare loop")


if __name__ == "__main__":
    main()
