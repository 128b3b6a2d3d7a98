"""The three executors give the sequential executor's results; the batched one's building blocks."""
import copy
import dataclasses

import pytest
import torch

from fedlib.engine.batched import BatchedTrainer, FunctionalOptimizer, buckets
from fedlib.engine.client import local_update
from fedlib.engine.core import Batch
from fedlib.engine.executors import spread
from fedlib.engine.training import OptimizerSpec
from fedlib.errors import TrainingDiverged
from fedlib.experiment import build, make_config, run
from fedlib.methods import METHODS

# Clients hold 280-342 samples: 9-11 steps per epoch, so buckets mask their shorter clients. Seed 1:
# with seed 0, FedProx's round-2 reference sits on a discontinuity of the training map (random
# relative perturbations of 1e-7 move one client's model by 2.5e-4 in 4 of 5 trials), where no
# other arithmetic can agree with it; everywhere else the executors agree to ~3e-8.
DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=2, batch_size=32, lr=0.05, seed=1)
REQUIRED = ["fedavg", "fedprox", "scaffold", "fedproto", "fedgpa"]


def compare_rounds(method: str, executor: str, rounds: int = 2, options=None, **overrides):
    """Each round, the sequential executor and ``executor`` train copies of the same tasks (the
    federation then continues from the sequential results); returns per round both result lists and the tasks."""
    cfg = make_config(method=method, executor=executor, **{**DIGITS, **overrides})
    fed = build(cfg)
    for k, v in (options or {}).items():
        setattr(fed.executor.batched, k, v)
    out = []
    for t in range(rounds):
        tasks = [fed.task(c, t) for c in fed.clients]
        other = fed.executor.run(fed.method, copy.deepcopy(tasks))
        reference = [local_update(fed.method, task, fed.setup, fed.trainer) for task in tasks]
        for r in reference:
            fed.clients[r.client_id].model, fed.clients[r.client_id].state = r.model, r.state
        fed.method.aggregate(fed.server, {r.client_id: r.upload for r in reference})
        out.append((reference, other, tasks))
    return out, fed


def jittered(obj, gen: torch.Generator, rel: float = 1e-7):
    """A copy of ``obj`` (a task's model or broadcast) with every floating tensor scaled by 1 + rel * N(0, 1)."""
    if isinstance(obj, torch.Tensor):
        return obj * (1 + rel * torch.randn(obj.shape, generator=gen, dtype=obj.dtype)) if obj.is_floating_point() \
            else obj.clone()
    if isinstance(obj, dict):
        return {k: jittered(v, gen, rel) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(jittered(v, gen, rel) for v in obj)
    return copy.deepcopy(obj)


def agreement_bound(fed, task, reference, trials: int = 10) -> float:
    """How far another executor's model may lie from the sequential one: float rounding (1e-5), or, where the
    training map is discontinuous at this task (a ReLU or a max-pool choice switching on a rounding-size change;
    which tasks are depends on the CPU's kernels and the data's last bits), ten times as far as the sequential
    executor itself moves when the model and broadcast it starts from are perturbed by relative 1e-7 (the largest
    of ``trials``; three missed a switch that the fourth to tenth perturbations find: the margin method's client 2
    on digits, 1.7e-4). It is computed only where the executors differ by more than rounding."""
    spread = 0.0
    for seed in range(trials):
        gen = torch.Generator().manual_seed(seed)
        moved = dataclasses.replace(task, model=jittered(task.model, gen), received=jittered(task.received, gen))
        spread = max(spread, max_difference(reference.model,
                                            local_update(fed.method, moved, fed.setup, fed.trainer).model))
    return max(1e-5, 10 * spread)


def max_difference(a, b) -> float:
    """Largest absolute difference between two nested structures of tensors (models, uploads)."""
    if isinstance(a, torch.Tensor):
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max([max_difference(a[k], b[k]) for k in a] or [0.0])
    if isinstance(a, (list, tuple)):
        return max([max_difference(x, y) for x, y in zip(a, b)] or [0.0])
    assert a == b
    return 0.0


@pytest.mark.slow
@pytest.mark.parametrize("method", REQUIRED + ["fedpac", "moon", "ditto", "fedrep", "lg_fedavg", "apfl"])
def test_batched_executor_matches_sequential(method):
    for overhead in (0.0, 1e6):  # one bucket per step count / one bucket with masked clients
        rounds, fed = compare_rounds(method, "batched", options={"overhead": overhead})
        for reference, batched, tasks in rounds:
            for a, b, task in zip(reference, batched, tasks):
                assert a.result.steps == b.result.steps
                gap = max_difference(a.model, b.model)
                if gap >= 1e-5:   # only where training is discontinuous at this task (seen on one CPU model)
                    assert gap < agreement_bound(fed, task, a), (method, gap)
                    continue
                assert max_difference(a.upload, b.upload) < 1e-4, method
                assert abs(a.result.loss - b.result.loss) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("method", REQUIRED)
def test_process_executor_is_bitwise_sequential_with_one_thread(method, one_thread):
    rounds, _ = compare_rounds(method, "process", workers=2)
    for reference, processed, _ in rounds:
        for a, b in zip(reference, processed):
            assert max_difference(a.model, b.model) == 0.0
            assert max_difference(a.upload, b.upload) == 0.0
            assert a.result == b.result


def test_fedpcl_on_features_batched_matches_sequential():
    """FedPCL's own setting (Adam, a projection network); with plain SGD at lr 0.05 on a CNN its
    contrastive loss is chaotic (a 1e-7 perturbation grows to 0.1), which no executor can match."""
    rounds, _ = compare_rounds("fedpcl", "batched", model="mlp", optimizer="adam", lr=1e-3, weight_decay=1e-4)
    for reference, batched, _ in rounds:
        for a, b in zip(reference, batched):
            assert max_difference(a.model, b.model) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pfedme", "perfedavg"])
def test_methods_with_their_own_step_fall_back_bitwise(method):
    rounds, _ = compare_rounds(method, "batched")
    for reference, batched, _ in rounds:
        for a, b in zip(reference, batched):
            assert max_difference(a.model, b.model) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["batched", "process"])
def test_whole_runs_agree_across_executors(executor):
    cfg = make_config(method="fedavg_ft", **{**DIGITS, "fraction": 0.5, "rounds": 3})
    a = run(cfg, cache_dir=None, progress=False)
    b = run(dataclasses.replace(cfg, executor=executor), cache_dir=None, progress=False)
    assert b["executor"] == executor
    for ra, rb in zip(a["history"], b["history"]):
        assert abs(ra["train_loss"] - rb["train_loss"]) < 1e-5
        assert abs(ra["personal_local_acc"] - rb["personal_local_acc"]) < 0.02  # at most a few test samples


def test_divergence_in_a_worker_is_reported_as_in_process():
    cfg = make_config(method="fedavg", executor="process", workers=2, **{**DIGITS, "lr": 1e6, "rounds": 3})
    with pytest.raises(TrainingDiverged, match=r"round \d+, client \d+"):
        run(cfg, cache_dir=None, progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in METHODS])
def test_local_losses_ignore_zero_weight_padding(method):
    """Every phase loss of every method gives the same value on a batch and on that batch padded
    with zero-weight samples: the batched executor may pad (after one round, so prototypes exist)."""
    needs = {"fedic": {"partition": {**DIGITS["partition"], "server": 10},
                       "hyper": {"server_steps": 2, "distill_steps": 2}},
             "creff": {"hyper": {"match_epochs": 2, "crt_epochs": 1}}}
    _, fed = compare_rounds(method, "sequential", rounds=1, local_epochs=1, **needs.get(method, {}))
    task = fed.task(fed.clients[1], 1)
    ctx = fed.context(task)
    models = fed.method.receive(ctx)
    idx = fed.setup.train_idx[1][:13]
    x, y = fed.trainer.x[idx], fed.trainer.y[idx]
    pad = torch.cat([idx, idx[:1].repeat(7)])
    xp, yp = fed.trainer.x[pad], fed.trainer.y[pad]
    weight = torch.cat([torch.ones(13), torch.zeros(7)])
    for phase in fed.method.local_phases(ctx):
        if phase.step is not None:
            continue
        loss_fn = phase.loss or fed.method.local_loss
        params = {k: v.clone().requires_grad_(True) for k, v in models[phase.target].items()}
        plain = loss_fn(fed.trainer.forward(params, x), Batch(x, y), params, ctx)
        padded = loss_fn(fed.trainer.forward(params, xp), Batch(xp, yp, weight), params, ctx)
        assert torch.isclose(plain, padded, rtol=1e-5, atol=1e-6), (method, float(plain), float(padded))


@pytest.mark.parametrize("spec", [OptimizerSpec("sgd"), OptimizerSpec("sgd", momentum=0.9, weight_decay=1e-3),
                                  OptimizerSpec("adam"), OptimizerSpec("adam", weight_decay=1e-4)])
def test_functional_optimizers_match_torch_optim(spec):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, generator=g)
    grads = [torch.randn(3, 4, generator=g) for _ in range(5)]
    p = torch.nn.Parameter(w.clone())
    opt = (torch.optim.Adam([p], lr=0.01, weight_decay=spec.weight_decay) if spec.kind == "adam" else
           torch.optim.SGD([p], lr=0.01, momentum=spec.momentum, weight_decay=spec.weight_decay))
    fopt = FunctionalOptimizer(spec, 0.01)
    params = {"w": w.clone()}
    state = fopt.init(params)
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
        params, state = fopt.update(params, {"w": grad}, state)
    assert torch.allclose(params["w"], p.detach(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("spec", [OptimizerSpec("sgd", 0.9, 1e-4), OptimizerSpec("adam", 0.0, 1e-4)])
def test_functional_optimizer_steps_every_used_parameter_as_torch_optim_and_leaves_unused_ones(spec):
    """Several parameters of different shapes in one foreach step, one of them unreached by the loss: the used
    ones follow torch.optim (per tensor), the unused one keeps its value and state (no weight decay)."""
    g = torch.Generator().manual_seed(1)
    start = {"a": torch.randn(3, 4, generator=g), "b": torch.randn(5, generator=g), "c": torch.randn(2, 2, generator=g)}
    ref = {k: torch.nn.Parameter(v.clone()) for k, v in start.items() if k != "c"}
    opt = (torch.optim.Adam(list(ref.values()), lr=0.01, weight_decay=spec.weight_decay) if spec.kind == "adam" else
           torch.optim.SGD(list(ref.values()), lr=0.01, momentum=spec.momentum, weight_decay=spec.weight_decay))
    fopt = FunctionalOptimizer(spec, 0.01)
    params = {k: v.clone() for k, v in start.items()}
    state = fopt.init(params)
    for _ in range(4):
        grads = {k: torch.randn(v.shape, generator=g) for k, v in start.items()}
        for k, p in ref.items():
            p.grad = grads[k].clone()
        opt.step()
        params, state = fopt.update(params, grads, state, unused=frozenset({"c"}))
    for k, p in ref.items():
        assert torch.allclose(params[k], p.detach(), rtol=0, atol=1e-7), k
    assert torch.equal(params["c"], start["c"]) and list(params) == ["a", "b", "c"]


def test_buckets_minimise_the_lockstep_cost():
    steps = [10, 9, 2, 1]
    # overhead 0: running a client costs its own steps, so every client is alone
    assert sorted(map(sorted, buckets(steps, 0.0))) == [[0], [1], [2], [3]]
    # huge overhead: one bucket, the short clients masked after their steps
    assert buckets(steps, 1e9) == [[0, 1, 2, 3]]
    # overhead 2: {10, 9} costs 10 * 4 = 40 and {2, 1} 2 * 4 = 8, cheaper than any other split
    assert sorted(map(sorted, buckets(steps, 2.0))) == [[0, 1], [2, 3]]


def test_spread_assigns_longest_first_to_the_least_loaded_worker():
    costs = [3, 5, 3, 4, 3]
    # by hand: 5 -> A, 4 -> B, 3 -> B (7), 3 -> A (8), 3 -> B (10); LPT is within 4/3 of the best (9, 9)
    assert spread(costs, 2) == [[1, 2], [3, 0, 4]]
    assert spread([1.0], 4) == [[0]]


def test_models_with_buffers_are_not_batched():
    from fedlib.models import SplitModel

    bn = SplitModel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)), 3, 2)
    assert not BatchedTrainer.supports(bn)
    assert BatchedTrainer.supports(SplitModel(torch.nn.Flatten(), 4, 2))


def test_batched_schedule_pads_the_last_batch_with_zero_weights():
    x = torch.randn(20, 3)
    trainer = BatchedTrainer(SplitModel_(), x, torch.zeros(20, dtype=torch.long), batch_size=8)
    idx, w = trainer.schedule(torch.arange(5, 15), epochs=2, max_steps=None, seed_keys=(0, 0, 0, 0))
    assert idx.shape == (4, 8) and w.shape == (4, 8)
    assert w.sum() == 20 and (w[[0, 2]] == 1).all() and w[1].tolist() == [1, 1] + [0] * 6
    for epoch in (idx[:2], idx[2:]):
        real = epoch.flatten()[:10]
        assert sorted(real.tolist()) == list(range(5, 15))  # each epoch a permutation of the client's samples
    idx, w = trainer.schedule(torch.arange(5, 15), epochs=2, max_steps=1, seed_keys=(0, 0, 0, 0))
    assert idx.shape == (1, 8)


def SplitModel_():
    from fedlib.models import SplitModel

    return SplitModel(torch.nn.Flatten(), 3, 2)



@pytest.mark.parametrize("method", ["pfedcspc", "fedntd", "feddecorr", "fedproc", "feddc", "grace", "fedperpp",
                                    "fedetf", "fedasam"])
def test_pfedcspc_chapter_methods_batched_match_sequential(method):
    """The local objectives of pFedCSPC and its baselines under the batched executor (FedASAM's own step
    falls back to client by client)."""
    hyper = {"pfedcspc": {"server_epochs": 3}}.get(method, {})
    rounds, _ = compare_rounds(method, "batched", hyper=hyper, model="mlp")
    for reference, batched, _ in rounds:
        for a, b in zip(reference, batched):
            assert a.result.steps == b.result.steps
            assert max_difference(a.model, b.model) < 1e-5, method


@pytest.mark.parametrize("executor", ["batched", "process"])
def test_drop_last_skips_each_epochs_partial_batch_in_every_executor(executor):
    """Clients of 280-342 samples, batch 32, 2 epochs: with drop_last a client of n samples steps
    2 * floor(n / 32) times (torch's DataLoader(drop_last=True)), without it 2 * ceil(n / 32) times; the other
    executors take the same steps to the same model."""
    rounds, fed = compare_rounds("fedavg", executor, rounds=1, drop_last=True, workers=2)
    for reference, other, _ in rounds:
        for a, b in zip(reference, other):
            n = len(fed.setup.train_idx[a.client_id])
            assert a.result.steps == b.result.steps == 2 * (n // 32)
            assert max_difference(a.model, b.model) < 1e-5
    rounds, fed = compare_rounds("fedavg", "sequential", rounds=1)
    for a in rounds[0][0]:
        n = len(fed.setup.train_idx[a.client_id])
        assert a.result.steps == 2 * -(-n // 32)


@pytest.mark.parametrize("drop_last", [False, True])
def test_training_steps_counts_the_steps_the_engine_takes(drop_last):
    """``training_steps`` (the chapters' share of a paper-scale run) reads only the partition's sizes; it agrees with
    the steps the clients take in two rounds of a run, and with half of them where half the clients take part."""
    from fedlib.experiment.wiring import client_sizes, training_steps

    cfg = make_config(method="fedavg", **{**DIGITS, "rounds": 2, "drop_last": drop_last})
    rounds, fed = compare_rounds("fedavg", "sequential", rounds=2, drop_last=drop_last)
    assert list(client_sizes(cfg)) == [len(idx) for idx in fed.setup.train_idx]
    assert training_steps(cfg) == sum(r.result.steps for reference, _, _ in rounds for r in reference)
    half = make_config(method="fedavg", **{**DIGITS, "rounds": 2, "drop_last": drop_last, "fraction": 0.5})
    assert training_steps(half) == round(training_steps(cfg) / 2)


def test_drop_last_keeps_the_one_batch_of_a_client_smaller_than_a_batch():
    from fedlib.engine.training import full_batches

    order = torch.arange(7)
    assert full_batches(order, 10, True).tolist() == list(range(7))
    assert full_batches(torch.arange(31), 10, True).tolist() == list(range(30))
    assert full_batches(torch.arange(31), 10, False).tolist() == list(range(31))
    assert full_batches(torch.arange(30), 10, True).tolist() == list(range(30))


def test_a_dead_worker_is_one_line_and_an_error_cancels_the_waiting_futures():
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from fedlib.engine.workers import collecting
    from fedlib.errors import WorkerDied

    with pytest.raises(WorkerDied, match="worker process of the runs died"):
        with collecting([], "no such pool", "runs"):
            raise BrokenProcessPool("killed")
    waiting = [Future(), Future()]
    with pytest.raises(KeyboardInterrupt):
        with collecting(waiting, "no such pool", "runs"):
            raise KeyboardInterrupt
    assert all(f.cancelled() for f in waiting)
