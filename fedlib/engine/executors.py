"""Cohort executors: one call per round runs the client side of every sampled client.

* ``sequential``: clients one after another in one module (the reference);
* ``process``: CPU worker processes with one thread each, clients spread over them by size;
* ``batched``: clients trained together on one device with torch.func (vmap over stacked
  parameters). Phases with their own step (pFedMe, Per-FedAvg) and models with buffers fall back to
  the sequential trainer.
All three draw the same mini-batches; on the CPU they agree with the sequential executor bitwise
where the arithmetic is the same and within float32 rounding otherwise (tests/test_executors.py).
"""
from __future__ import annotations

import copy
import math
import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import torch

from fedlib.engine.batched import BatchedTrainer
from fedlib.engine.client import ClientResult, ClientTask, Setup, begin, finish, local_update
from fedlib.engine.core import ClientContext
from fedlib.engine.training import Trainer, diverged
from fedlib.engine.workers import POOLS, bounded_workers, collecting, completed, start_pool, worker_process_setup
from fedlib.errors import ConfigError, TrainingDiverged

EXECUTORS = ("sequential", "process", "batched")


class SequentialExecutor:
    name = "sequential"

    def __init__(self, setup: Setup, trainer: Trainer, **_):
        self.setup, self.trainer = setup, trainer

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        return [local_update(method, task, self.setup, self.trainer) for task in tasks]

    def close(self) -> None:
        pass


class BatchedExecutor(SequentialExecutor):
    name = "batched"

    def __init__(self, setup: Setup, trainer: Trainer, overhead: float | None = None,
                 batched: BatchedTrainer | None = None, **_):
        super().__init__(setup, trainer)
        # ``batched``: a trainer shared with other runs on the same data tensors (run-batched grids)
        self.batched = batched or BatchedTrainer.like(trainer, overhead)
        self.supported = BatchedTrainer.supports(trainer.model)

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        if not self.supported:
            return super().run(method, tasks)
        (out,) = train_cohorts(self.batched, [Cohort(method, self.setup, self.trainer, tasks)])
        if isinstance(out, BaseException):
            raise out
        return out


@dataclass
class Cohort:
    """One run's clients of one round: its method, static facts, trainer and the clients' tasks."""
    method: object
    setup: Setup
    trainer: Trainer
    tasks: list


def train_cohorts(batched: BatchedTrainer, cohorts: list[Cohort]) -> list:
    """The client side of one round of several runs at once: every client of every cohort goes through
    ``receive`` and ``local_phases``; clients that agree on their method (the same instance), their
    phases, the structure of what their loss reads and the facts it may read (round, lr, ...) train in
    lockstep in one vmapped step per mini-batch (``BatchedTrainer.train_group``); then ``upload``.

    Returns per cohort its results, or the exception that ended it: a run whose loss becomes non-finite
    (``TrainingDiverged``) or whose hooks raise leaves without disturbing the others (vmapped clients
    are independent; its remaining phases are skipped)."""
    ended: dict[int, BaseException] = {}
    members: list[tuple[int, int, ClientContext]] = []     # (cohort, task position, ctx)
    begun = []
    for j, cohort in enumerate(cohorts):
        for i, task in enumerate(cohort.tasks):
            try:
                ctx = cohort.setup.context(task, cohort.trainer)
                begun.append(begin(cohort.method, ctx))
                members.append((j, i, ctx))
            except Exception as exc:
                ended.setdefault(j, exc)
    models = [b[0] for b in begun]
    stats: list[list] = [[] for _ in members]
    plans: dict[tuple, list[int]] = {}
    for k, ((j, _, ctx), (_, phases)) in enumerate(zip(members, begun)):
        setup = cohorts[j].setup
        key = (id(cohorts[j].method), tuple(phases), context_signature(ctx), setup.local_epochs, setup.lr)
        plans.setdefault(key, []).append(k)
    for (_, phases, *_), plan in plans.items():
        for p_idx, phase in enumerate(phases):
            live = [k for k in plan if members[k][0] not in ended]
            if not live:
                break
            method = cohorts[members[live[0]][0]].method
            epochs, lr, loss_fn = cohorts[members[live[0]][0]].setup.phase_plan(phase, method)
            keys = [cohorts[members[k][0]].setup.seed_keys(cohorts[members[k][0]].tasks[members[k][1]], p_idx)
                    for k in live]
            idxs = [cohorts[members[k][0]].setup.train_idx[cohorts[members[k][0]].tasks[members[k][1]].client_id]
                    for k in live]
            ctxs = [members[k][2] for k in live]
            if phase.step is not None:  # a method's own step cannot be vmapped: its run's trainer, client by client
                outs: list = []
                for k, ti, sk, ctx in zip(live, idxs, keys, ctxs):
                    try:
                        outs.append(cohorts[members[k][0]].trainer.train(models[k][phase.target], phase, loss_fn,
                                                                        ctx, ti, epochs, lr, sk))
                    except TrainingDiverged as exc:
                        ended.setdefault(members[k][0], exc)
                        outs.append(None)
            else:
                try:
                    outs = batched.train_group([models[k][phase.target] for k in live], ctxs, idxs, keys, phase,
                                               loss_fn, epochs, lr)
                except Exception as exc:
                    for k in live:
                        ended.setdefault(members[k][0], exc)
                    continue
            for k, out, ctx in zip(live, outs, ctxs):
                if out is None:
                    continue
                params, total, count, steps = out
                if not math.isfinite(total):
                    ended.setdefault(members[k][0], diverged(total, ctx, lr))
                    continue
                models[k][phase.target] = params
                stats[k].append((total, count, steps, phase.target))
    results: list[list] = [[None] * len(c.tasks) for c in cohorts]
    for k, (j, i, ctx) in enumerate(members):
        if j in ended:
            continue
        try:
            results[j][i] = finish(cohorts[j].method, ctx, models[k], stats[k])
        except Exception as exc:
            ended.setdefault(j, exc)
    return [ended.get(j, results[j]) for j in range(len(cohorts))]


def context_signature(ctx) -> str:
    """Tree structure, tensor shapes and other values of what a vmapped loss sees of a client's context,
    and the scalar facts it may read (round, rounds, classes, lr, batch size): clients train in lockstep only
    when these agree (FedFomo's clients receive different numbers of models; runs may be at other rounds)."""
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((ctx.received, ctx.state, ctx.counts))
    return repr((spec, [tuple(v.shape) if isinstance(v, torch.Tensor) else v for v in leaves],
                 ctx.round, ctx.rounds, ctx.num_classes, ctx.lr, ctx.batch_size))


# ---------------------------------------------------------------------- process-parallel
_WORKER: dict = {}


def _init_worker(model, x, y, batch_size, optimizer, drop_last, precision):
    worker_process_setup()
    torch.set_num_threads(1)
    # tensors arrive in shared memory: a private copy keeps the workers from training one storage
    _WORKER["trainer"] = Trainer(copy.deepcopy(model), x, y, batch_size, optimizer, drop_last, precision)


def _run_chunk(payload: bytes) -> bytes:
    """Tasks and results travel as plain pickles (copies), not as shared-memory tensors: only the
    read-only dataset is shared, and no file descriptor is held per client tensor."""
    setup, method, tasks = pickle.loads(payload)
    return pickle.dumps([local_update(method, task, setup, _WORKER["trainer"]) for task in tasks],
                        protocol=pickle.HIGHEST_PROTOCOL)


def spread(costs: list[float], workers: int) -> list[list[int]]:
    """Longest-processing-time-first assignment of tasks (by cost) to workers."""
    loads = [0.0] * workers
    chunks: list[list[int]] = [[] for _ in range(workers)]
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        w = min(range(workers), key=lambda k: loads[k])
        chunks[w].append(i)
        loads[w] += costs[i]
    return [c for c in chunks if c]


class ProcessExecutor:
    name = "process"

    def __init__(self, setup: Setup, trainer: Trainer, workers: int | None = None, **_):
        if trainer.x.is_cuda:
            raise ConfigError("executor", "process", "'sequential' or 'batched' on a CUDA device "
                              "(worker processes train on the CPU)")
        self.setup, self.trainer = setup, trainer
        self.workers = bounded_workers(workers or os.cpu_count() or 1, len(setup.train_idx),
                                       "worker processes of the 'process' executor")

    def _pool(self, method) -> ProcessPoolExecutor:
        t = self.trainer
        key = (t.x.data_ptr(), tuple(t.x.shape), t.y.data_ptr(), repr(t.model), t.batch_size, t.drop_last, t.precision,
               t.optimizer, self.workers)

        def make():
            t.x.share_memory_()
            t.y.share_memory_()
            return start_pool(self.workers, _init_worker,
                              (copy.deepcopy(t.model), t.x, t.y, t.batch_size, t.optimizer, t.drop_last, t.precision),
                              hide_main=type(method).__module__ != "__main__",
                              what="worker processes of the 'process' executor")
        return POOLS.get("clients", key, make, keep=(t.x, t.y))

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        pool = self._pool(method)
        chunks = spread([len(self.setup.train_idx[t.client_id]) for t in tasks], self.workers)
        futures: list = []
        results: list = [None] * len(tasks)
        with collecting(futures, "clients", "'process' executor"):
            futures += [pool.submit(_run_chunk, pickle.dumps((self.setup, method, [tasks[i] for i in chunk]),
                                                             protocol=pickle.HIGHEST_PROTOCOL)) for chunk in chunks]
            chunk_of = dict(zip(futures, chunks))
            for future in completed(futures, "clients", "'process' executor"):
                for i, res in zip(chunk_of[future], pickle.loads(future.result())):
                    results[i] = res
        return results

    def close(self) -> None:
        pass  # the pool is kept for the next run with the same data (see POOLS)


def make_executor(name, setup: Setup, trainer: Trainer, **options):
    """The executor called ``name``, or the one a factory ``name(setup, trainer, **options)`` makes."""
    if callable(name):
        return name(setup, trainer, **options)
    kinds = {"sequential": SequentialExecutor, "process": ProcessExecutor, "batched": BatchedExecutor}
    if name not in kinds:
        raise ConfigError("executor", name, f"one of {', '.join(EXECUTORS)}")
    return kinds[name](setup, trainer, **options)
