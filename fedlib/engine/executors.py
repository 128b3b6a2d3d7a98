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

import atexit
import contextlib
import copy
import os
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import torch

from fedlib.engine.batched import BatchedTrainer
from fedlib.engine.client import ClientResult, ClientTask, Setup, begin, finish, local_update
from fedlib.engine.training import OptimizerSpec, Trainer
from fedlib.errors import ConfigError

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

    def __init__(self, setup: Setup, trainer: Trainer, overhead: float | None = None, **_):
        super().__init__(setup, trainer)
        self.batched = BatchedTrainer(trainer.model, trainer.x, trainer.y, trainer.batch_size, trainer.optimizer,
                                      overhead=overhead)
        self.supported = BatchedTrainer.supports(trainer.model)

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        if not self.supported:
            return super().run(method, tasks)
        setup, trainer = self.setup, self.trainer
        ctxs = [setup.context(t, trainer) for t in tasks]
        begun = [begin(method, ctx) for ctx in ctxs]
        models = [b[0] for b in begun]
        stats: list[list] = [[] for _ in tasks]
        plans: dict[tuple, list[int]] = {}
        for i, (_, phases) in enumerate(begun):   # lockstep groups: same phases, same context structure
            plans.setdefault((tuple(phases), context_signature(ctxs[i])), []).append(i)
        for (phases, _), members in plans.items():
            for p_idx, phase in enumerate(phases):
                epochs, lr, loss_fn = setup.phase_plan(phase, method)
                keys = [setup.seed_keys(tasks[i], p_idx) for i in members]
                idxs = [setup.train_idx[tasks[i].client_id] for i in members]
                if phase.step is not None:  # a method's own step cannot be vmapped
                    outs = [trainer.train(models[i][phase.target], phase, loss_fn, ctxs[i], ti, epochs, lr, k)
                            for i, ti, k in zip(members, idxs, keys)]
                else:
                    outs = self.batched.train_group([models[i][phase.target] for i in members],
                                                    [ctxs[i] for i in members], idxs, keys, phase, loss_fn, epochs, lr)
                for i, (params, total, count, steps) in zip(members, outs):
                    models[i][phase.target] = params
                    stats[i].append((total, count, steps, phase.target))
        return [finish(method, ctx, m, s) for ctx, m, s in zip(ctxs, models, stats)]


def context_signature(ctx) -> str:
    """Tree structure, tensor shapes and other values of what a vmapped loss sees of a client's context:
    clients train in lockstep only when these agree (FedFomo's clients receive different numbers of models)."""
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten((ctx.received, ctx.state, ctx.counts))
    return repr((spec, [tuple(v.shape) if isinstance(v, torch.Tensor) else v for v in leaves]))


# ---------------------------------------------------------------------- process-parallel
_WORKER: dict = {}


def worker_process_setup() -> None:
    """In a worker process: leave Ctrl-C to the parent (it shuts the pool down; a kernel's shutdown
    interrupts its whole process group) and exit if the parent dies."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _init_worker(model, x, y, batch_size, optimizer):
    worker_process_setup()
    torch.set_num_threads(1)
    # tensors arrive in shared memory: a private copy keeps the workers from training one storage
    _WORKER["trainer"] = Trainer(copy.deepcopy(model), x, y, batch_size, optimizer)


def _run_chunk(payload: bytes) -> bytes:
    """Tasks and results travel as plain pickles (copies), not as shared-memory tensors: only the
    read-only dataset is shared, and no file descriptor is held per client tensor."""
    setup, method, tasks = pickle.loads(payload)
    return pickle.dumps([local_update(method, task, setup, _WORKER["trainer"]) for task in tasks],
                        protocol=pickle.HIGHEST_PROTOCOL)


def _ready() -> bool:
    return "trainer" in _WORKER


@contextlib.contextmanager
def _main_script_hidden(hide: bool):
    """Start workers without re-running the user's script (spawned children import ``__main__``
    from its file otherwise, which needs an ``if __name__ == "__main__"`` guard). Kept visible when the
    method itself is defined in the script: workers must import it then."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not hide or main is None or path is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class _PoolCache:
    """One pool of workers per process, reused while the data, model architecture and training
    settings stay the same (a notebook running many configurations starts its workers once)."""

    def __init__(self):
        self.key, self.pool, self.keep = None, None, None
        atexit.register(self.shutdown)

    def get(self, key, make, keep):
        if self.pool is not None and key != self.key:
            self.shutdown()
        if self.pool is None:
            self.pool, self.key, self.keep = make(), key, keep
        return self.pool

    def shutdown(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.key, self.pool, self.keep = None, None, None


POOLS = _PoolCache()


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
        self.workers = workers or os.cpu_count() or 1

    def _pool(self, method) -> ProcessPoolExecutor:
        t = self.trainer
        key = (t.x.data_ptr(), tuple(t.x.shape), t.y.data_ptr(), repr(t.model), t.batch_size, t.optimizer, self.workers)

        def make():
            t.x.share_memory_()
            t.y.share_memory_()
            ctx = torch.multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker,
                                       initargs=(copy.deepcopy(t.model), t.x, t.y, t.batch_size, t.optimizer))
            with _main_script_hidden(type(method).__module__ != "__main__"):
                try:
                    for f in [pool.submit(_ready) for _ in range(self.workers)]:
                        f.result()  # start every worker now
                except BrokenProcessPool:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise RuntimeError("the 'process' executor could not start its worker processes; a script "
                                       "that defines its own method must run under `if __name__ == '__main__':`")
            return pool
        return POOLS.get(key, make, keep=(t.x, t.y))

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        pool = self._pool(method)
        chunks = spread([len(self.setup.train_idx[t.client_id]) for t in tasks], self.workers)
        futures = [pool.submit(_run_chunk, pickle.dumps((self.setup, method, [tasks[i] for i in chunk]),
                                                        protocol=pickle.HIGHEST_PROTOCOL)) for chunk in chunks]
        results: list = [None] * len(tasks)
        try:
            for chunk, future in zip(chunks, futures):
                for i, res in zip(chunk, pickle.loads(future.result())):
                    results[i] = res
        except BrokenProcessPool:
            POOLS.shutdown()
            raise RuntimeError("a worker process of the 'process' executor died (killed, or out of memory); "
                               "run again with --executor sequential to see the error") from None
        except BaseException:
            for f in futures:
                f.cancel()
            raise
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
