"""Running the chapters' grids: where runs execute, a worker pool for book-scale grids, committed records
of a grid, and recording a chapter's reference- or paper-scale grid (``python -m fedlib records``)."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Generic, TypeVar

from fedlib.engine.workers import POOLS, collecting, completed, worker_died
from fedlib.errors import check
from fedlib.experiment import Config, read_cached_record, run


@dataclass(frozen=True)
class Runtime:
    """Where a session's runs execute: never part of a result's key. The chapters build their configs without it;
    the runs take it where they start (``placed``). A notebook's set-up (``open_chapter``) returns the chapter with
    its runtime; ``records`` makes its own from ``--device`` and ``--executor``."""
    device: str = "cpu"
    executor: str = "sequential"

    @classmethod
    def chosen(cls, device: str = "auto", executor: str = "auto") -> Runtime:
        """"auto": a CUDA device with the batched executor when one is visible, else the CPU with the sequential
        executor."""
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if executor == "auto":
            executor = "batched" if device.startswith("cuda") else "sequential"
        return cls(device, executor)

    def placed(self, cfg: Config) -> Config:
        """``cfg`` on this runtime's device and executor."""
        return dataclasses.replace(cfg, device=self.device, executor=self.executor)

    def trained(self, cfg: Config):
        """The trained Federation of ``cfg`` here (``experiment.trained``: cached as an artifact)."""
        from fedlib.experiment import trained

        return trained(self.placed(cfg))

    def default_workers(self) -> int:
        """Runs on the CPU are small enough that two single-threaded runs at once beat one run on two
        threads (FedGPA at book scale: 1.7x the throughput on 2 cores); a GPU runs one at a time."""
        import os

        return 1 if self.device != "cpu" else max(1, min(len(os.sched_getaffinity(0)), 8))


ON_CPU = Runtime()   # the default: the CPU, one run after another in each worker


B = TypeVar("B", bound="Budget")


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What a chapter trains at one scale; each chapter subclasses it with the fields its grids read
    (``FedGPA``: local epochs, the data divisor, the seeds of each table, ...)."""
    rounds: int
    seeds: list[int]
    last: int = 1   # evaluations averaged into a run's final value (FedPRP: the paper's last rounds)


class Scales(Mapping[str, B], Generic[B]):
    """A chapter's budget per scale: ``fedlib.experiment.SCALES`` ("ci", "book", "reference", "paper"), each an
    instance of the chapter's one ``Budget`` class (checked when the chapter is imported). ``SCALES[name]`` of an
    unknown name raises a ``ConfigError`` that lists the scales."""

    def __init__(self, **by_scale: B):
        from fedlib.experiment import SCALES as EXPERIMENT_SCALES

        if list(by_scale) != list(EXPERIMENT_SCALES):
            raise ValueError(f"a chapter defines the scales {', '.join(EXPERIMENT_SCALES)} in this order, "
                             f"not {', '.join(by_scale)}")
        kinds = {type(b) for b in by_scale.values()}
        if len(kinds) != 1 or not issubclass(next(iter(kinds)), Budget):
            raise ValueError("every scale's budget is an instance of one Budget class, not "
                             f"{sorted(k.__name__ for k in kinds)}")
        self._by_scale = by_scale

    def __getitem__(self, scale: str) -> B:
        check(scale in self._by_scale, "scale", scale, f"one of {', '.join(self._by_scale)}")
        return self._by_scale[scale]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_scale)

    def __len__(self) -> int:
        return len(self._by_scale)


def _run_one(cfg: Config, kwargs: dict, keep_diverged: bool = False) -> dict:
    """The run's record; ``keep_diverged``: a run whose loss became nan gives a record that says so (``diverged``:
    the message, no metrics; never cached or committed) instead of stopping the grid (a tuning grid's high rates)."""
    from fedlib.errors import TrainingDiverged

    try:
        return run(cfg, progress=False, **kwargs)
    except TrainingDiverged as exc:
        if not keep_diverged:
            raise
        return {"config": cfg.flat(), "key": cfg.key(), "seed": cfg.seed, "diverged": str(exc), "final": {},
                "history": []}


def _run_pool(workers: int):
    """The session's pool of single-threaded run workers (the engine's worker pools, purpose "runs"),
    reused by every grid."""
    from fedlib.engine.workers import single_threaded_run_worker, start_pool

    return POOLS.get("runs", workers, lambda: start_pool(workers, single_threaded_run_worker,
                                                         what="grid's worker processes"))


def run_all(configs: list[Config], desc: str = "runs", progress: bool = True, store: str | None = None,
            workers: int | None = None, keep_diverged: bool = False, runtime: Runtime = ON_CPU,
            **kwargs) -> list[dict]:
    """Run (or read from the cache) every config, with one progress bar over runs. Uncached runs are
    spread over ``workers`` single-threaded processes (default: one per CPU core on the CPU, none on a
    GPU), on ``runtime``'s device and executor. ``store``: also write each record to ``results/<store>/`` (the
    paper-scale records the book shows); ``keep_diverged``: see ``_run_one``."""
    from pathlib import Path

    from tqdm import tqdm

    from fedlib import results
    from fedlib.experiment import DEFAULT_CACHE
    from fedlib.experiment.records import pin_code_version

    workers = runtime.default_workers() if workers is None else workers
    configs = [runtime.placed(c) for c in configs]
    pin_code_version()   # the workers' records name the code they started with
    cache = kwargs.get("cache_dir", DEFAULT_CACHE)
    out: list = [None] * len(configs)
    pending: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        path = Path(cache) / f"{c.key()}.json" if cache is not None else None
        record = read_cached_record(path) if path is not None else None
        if record is not None:
            out[i] = record
        else:
            pending.setdefault(c.key() if cache is not None else str(i), []).append(i)
    bar = tqdm(total=len(configs), initial=len(configs) - sum(map(len, pending.values())), desc=desc,
               **({} if progress else {"disable": True}))  # TQDM_DISABLE=1 still applies
    if workers > 1 and len(pending) > 1:
        pool = _run_pool(workers)
        futures = {pool.submit(_run_one, configs[idx[0]], kwargs, keep_diverged): idx for idx in pending.values()}
        with collecting(futures, "runs", "runs (--workers)"):
            for future in completed(futures, "runs", "runs (--workers)"):
                for i in futures[future]:
                    out[i] = future.result()
                bar.update(len(futures[future]))
    else:
        for idx in pending.values():
            record = _run_one(configs[idx[0]], kwargs, keep_diverged)
            for i in idx:
                out[i] = record
            bar.update(len(idx))
    bar.close()
    if store:
        for record in out:
            if "diverged" not in record:
                results.write(record, store)
    return out


def run_grid(grid: dict, desc: str = "runs", progress: bool = True, store: str | None = None, **kwargs) -> dict:
    """Run a grid {cell: [configs, one per seed]} in one ``run_all`` (one pool, one progress bar) and
    return {cell: [records in the same order]}."""
    records = iter(run_all([c for configs in grid.values() for c in configs], desc=desc, progress=progress,
                           store=store, **kwargs))
    return {cell: [next(records) for _ in configs] for cell, configs in grid.items()}


def nested(cells: dict) -> dict:
    """{(outer, inner): value} as {outer: {inner: value}}, in the grid's order."""
    out: dict = {}
    for (outer, inner), value in cells.items():
        out.setdefault(outer, {})[inner] = value
    return out


def flat(cells: dict) -> dict:
    """{outer: {inner: value}} as {(outer, inner): value}: a nested table keyed as its grid keys it."""
    return {(outer, inner): value for outer, inner_cells in cells.items() for inner, value in inner_cells.items()}


def with_seeds(cfg: Config, seeds) -> list[Config]:
    return [dataclasses.replace(cfg, seed=s) for s in seeds]


def stored_grid(chapter: str, grid: dict, root=None) -> dict:
    """For a grid {cell: [configs over seeds]}: the committed records of each cell (current ones only), the cells
    that have stale records, and the seeds recorded as diverged (``results.write_diverged``: an outcome, not a gap).
    Returns {cell: {"records": [...], "stale": n, "diverged": [seeds], "missing": n}}."""
    from fedlib import results

    root = root or results.RESULTS
    flat = [c for configs in grid.values() for c in configs]
    found = iter(results.lookup(chapter, flat, root))
    diverged = results.diverged_keys(chapter, root)
    out = {}
    for cell, configs in grid.items():
        hits = [next(found) for _ in configs]
        out[cell] = {"records": [h.record for h in hits if h is not None and not h.stale],
                     "stale": sum(1 for h in hits if h is not None and h.stale),
                     "diverged": [c.seed for c, h in zip(configs, hits) if h is None and c.key() in diverged],
                     "missing": sum(1 for c, h in zip(configs, hits) if h is None and c.key() not in diverged)}
    return out


def with_diverged(stored: dict) -> dict:
    """``stored_grid``'s answer as runs: {cell: its committed records, and a stand-in ``{"seed", "diverged",
    "final": {}}`` for each seed recorded as diverged} (what ``run_grid(keep_diverged=True)`` gives a page's own
    runs)."""
    return {cell: c["records"] + [{"seed": seed, "diverged": True, "final": {}} for seed in c["diverged"]]
            for cell, c in stored.items()}


def seeds_of(runs: dict | None) -> list[int]:
    """The seeds every cell of runs {cell: records} has, sorted: the seeds a table's paired margins read (none for
    None: a table not complete yet)."""
    recorded = [{int(r["seed"]) for r in records} for records in (runs or {}).values()]
    return sorted(set.intersection(*recorded)) if recorded else []


def partial_seeds(runs: dict | None) -> str:
    """The seeds some cells of runs {cell: records} have and others lack, in words ("seed 1 in 9 of 20 cells"),
    or "": runs recorded beside a table's paired seeds, which no margin reads yet."""
    cells = [{int(r["seed"]) for r in records} for records in (runs or {}).values()]
    paired = set(seeds_of(runs))
    extra = sorted(set().union(*cells) - paired) if cells else []
    return ", ".join(f"seed {seed} in {sum(seed in c for c in cells)} of {len(cells)} cells" for seed in extra)


def complete_runs(chapter: str, grid: dict, root=None) -> dict | None:
    """{cell: committed records} of ``grid`` when every cell has a current record for each of its configs (every
    seed), else None: a table decides its claims only when complete. A table whose seeds were raised after it was
    recorded (seeds added to decide an inconclusive claim) decides on the seeds every cell has meanwhile, once each
    cell has ``DECIDING_SEEDS`` of them (or all its configs, if it has fewer): the runs of a seed some cell still
    lacks are left out, so every margin stays paired."""
    return complete_of(grid, stored_grid(chapter, grid, root))


def complete_of(grid: dict, stored: dict) -> dict | None:
    """``complete_runs`` on records already looked up (``stored``: ``stored_grid``'s answer for ``grid``)."""
    from fedlib.studies.claims import DECIDING_SEEDS

    runs = {cell: c["records"] for cell, c in stored.items()}
    if all(len(runs[cell]) == len(configs) for cell, configs in grid.items()):
        return runs
    recorded = [{int(r["seed"]) for r in records} for records in runs.values()]
    common = set.intersection(*recorded) if recorded else set()
    if not all(len(common & {c.seed for c in configs}) >= min(len(configs), DECIDING_SEEDS)
               for configs in grid.values()):
        return None
    return {cell: [r for r in records if int(r["seed"]) in common] for cell, records in runs.items()}


CONVERGENCE_SEEDS = (0, 1, 2)   # the 3x runs: seed 0 for the curves, 0-2 for the margin at 3x paired by seed


def convergence_grid(configs: dict, factor: int = 3) -> dict:
    """{label: [config]} -> {label: [the same config at ``factor`` times its rounds, seeds CONVERGENCE_SEEDS]}: the
    evidence that a reference budget has converged (the chapter compares each endpoint with the reference run's,
    and the paper's method's margin over its main baseline at both budgets)."""
    return {label: [dataclasses.replace(cfgs[0], rounds=cfgs[0].rounds * factor, seed=s) for s in CONVERGENCE_SEEDS]
            for label, cfgs in configs.items()}


def recording_order(tables: dict, seeds=None, only=None, precision: str = "fp32") -> list[Config]:
    """A chapter's configs at one scale in the order the ``records`` command fills them: ``tables``
    ({table: {cell: [configs over seeds]}}, the headline table first) one table after the other, each
    seed by seed (a partial run still fills whole tables, one seed at a time). ``seeds``: run exactly these
    seeds in every table instead of each table's own; ``only``: these tables; ``precision``: every config in
    this arithmetic (fp32, the chapters' own, or bf16/tf32: records with keys of their own). A config that two
    tables share (e.g. an ablation's full model) is listed once."""
    if only is not None:
        unknown = [t for t in only if t not in tables]
        check(not unknown, "tables", ", ".join(unknown), f"tables of this chapter: {', '.join(tables)}")
    out: dict[str, Config] = {}
    for name, grid in tables.items():
        if only is not None and name not in only:
            continue
        cells = [[dataclasses.replace(cfg, precision=precision) for cfg in configs] for configs in grid.values()]
        if seeds is not None:
            cells = [[dataclasses.replace(configs[0], seed=int(s)) for s in seeds] for configs in cells]
        by_seed: dict[int, list[Config]] = {}
        for configs in cells:
            for cfg in configs:
                by_seed.setdefault(cfg.seed, []).append(cfg)
        for seed in sorted(by_seed, key=lambda s: [c.seed for configs in cells for c in configs].index(s)):
            for cfg in by_seed[seed]:
                out.setdefault(cfg.key(), cfg)
    return list(out.values())


def _record_job(configs: list[Config], chapter: str, root, deadline: float | None, batched: bool,
                cache_dir, scale: str) -> list[tuple]:
    """In a worker process: train ``configs`` (one run-batched group, or one config) with the cache's
    checkpoints (a later call resumes them), write each finished record to ``results/<chapter>/``; returns
    per config (status, what to log): "done" with its final accuracies, "failed" with the error, "left"."""
    from fedlib import results
    from fedlib.errors import TrainingDiverged
    from fedlib.experiment import run_many
    from fedlib.experiment.wiring import training_samples

    if batched:
        outcomes = run_many(configs, cache_dir=cache_dir, progress=False, deadline=deadline)
    else:
        outcomes = []
        for cfg in configs:
            try:
                outcomes.append(run(cfg, cache_dir=cache_dir, progress=False))
            except Exception as exc:
                outcomes.append(exc)
    cfg_of = {id(outcome): cfg for cfg, outcome in zip(configs, outcomes)}
    out = []
    for outcome in outcomes:
        if isinstance(outcome, dict):
            results.write({**outcome, "scale": scale}, chapter, root)
            accs = {k: round(v, 4) for k, v in outcome["final"].items() if k.endswith("_acc")}
            sizes = [sum(counts) for counts in outcome["train_counts"]]   # no second load of the data set
            rate = training_samples(cfg_of[id(outcome)], sizes) / outcome["wall_time_s"]
            out.append(("done", f"{outcome['wall_time_s']:.0f} s ({rate:,.0f} samples/s), final {json.dumps(accs)}"))
        elif isinstance(outcome, BaseException):
            if isinstance(outcome, TrainingDiverged):   # deterministic: kept, so the grid says it and moves on
                results.write_diverged(cfg_of[id(outcome)], str(outcome), chapter, scale, root or results.RESULTS)
            out.append(("failed", f"{type(outcome).__name__}: {outcome}"))
        else:
            out.append(("left", "stopped at the deadline; its checkpoint resumes it"))
    return out


def projected_hours(configs: list[Config], hits: list, todo: list[Config], device: str) -> float | None:
    """Hours of training the configs ``todo`` need on ``device`` (cpu | cuda), at the rate per local step
    (``training_steps``) of the recorded runs among ``configs`` on that kind of device (``hits``: their
    ``results.lookup``): the median over the same method's records, or over every record where the method has none
    yet. None before any record on that kind of device."""
    import statistics

    from fedlib.experiment.wiring import training_steps

    rates: dict[str, list[float]] = {}
    for cfg, hit in zip(configs, hits):
        if hit is not None and not hit.stale and str(hit.record.get("device", "")).startswith(device):
            rates.setdefault(cfg.method, []).append(hit.record["wall_time_s"] / training_steps(cfg))
    if not rates:
        return None
    every = [r for method in rates.values() for r in method]
    return sum(training_steps(c) * statistics.median(rates.get(c.method, every)) for c in todo) / 3600


def run_labels(configs: list[Config]) -> dict[str, str]:
    """{key: how the records log names the run}: its method, the fields that tell ``configs`` apart (a dict field
    by its entries, e.g. ``partition.s=20``, ``hyper.lam=0.1``; unset ones left out) and its seed."""
    def fields(cfg: Config) -> dict:
        out = {}
        for name, value in cfg.flat().items():
            if isinstance(value, dict):
                out.update({f"{name}.{k}": v for k, v in value.items()})
            elif name not in ("method", "seed", "device", "executor", "workers"):
                out[name] = value
        return out

    flat = [fields(c) for c in configs]
    names = sorted({name for f in flat for name in f})
    varying = [n for n in names if len({json.dumps(f.get(n), sort_keys=True, default=str) for f in flat}) > 1]
    return {c.key(): " ".join([c.method, *(f"{n}={f[n]}" for n in varying if f.get(n) is not None), f"seed {c.seed}"])
            for c, f in zip(configs, flat)}


def record_grid(configs: list[Config], chapter: str, workers: int = 1, deadline_s: float | None = None,
                device: str = "cuda", executor: str = "batched", root=None, log=print,
                max_runs: int | None = None, cache_dir=None, scale: str = "paper") -> dict:
    """Run every config that has no current record under ``results/<chapter>/`` and write its record, which
    names its ``scale`` (reference or paper).

    With the batched executor, configs that can share a vmapped step run together (``run_many``: groups of
    at most ``max_runs``); otherwise one config per job. Jobs go to ``workers`` processes at once, in the
    order of ``configs`` (on a GPU several groups overlap). Every run checkpoints into the cache, so a call
    cut short loses at most its last rounds: run the same command again to go on. With ``deadline_s`` no job
    starts after it, run-batched groups start no round after it, and the call returns soon after (at most
    ``DEADLINE_GRACE_S`` later: a process still busy then is stopped, keeping its last checkpoint).
    A run that raises is logged and counted, and the others go on. ``cache_dir``: the runs' cache (records and
    checkpoints), default ``.fedlib-cache``.
    Returns {"done": n, "failed": n, "skipped": n, "left": n, "wall_s": s}."""
    import time

    from fedlib import results
    from fedlib.engine.workers import bounded_workers, single_threaded_run_worker, start_pool, stop_pool
    from fedlib.experiment import DEFAULT_CACHE
    from fedlib.experiment.records import pin_code_version

    start = time.time()
    pin_code_version()   # the workers' records name the code they started with
    cache_dir = cache_dir or DEFAULT_CACHE
    deadline = None if deadline_s is None else start + deadline_s
    root = root or results.RESULTS
    todo, jobs = recording_plan(configs, chapter, root, device, executor, max_runs, scale, workers, log)
    if not jobs:   # everything recorded: no worker process to start
        return {"done": 0, "failed": 0, "skipped": len(configs), "left": 0, "wall_s": time.time() - start}
    workers = bounded_workers(workers, len(jobs), "records' worker processes")
    pool = start_pool(workers, single_threaded_run_worker, what="records' worker processes")
    try:
        counts = _run_jobs(pool, jobs, workers, (chapter, root, deadline, executor == "batched", cache_dir, scale),
                           run_labels(todo), start, log)
    finally:
        stop_pool(pool, kill=True)
    return {"done": counts["done"], "failed": counts["failed"], "skipped": len(configs) - len(todo),
            "left": len(todo) - counts["done"] - counts["failed"], "wall_s": time.time() - start}


DEADLINE_GRACE_S = 90.0   # a run-batched group finishes the round it is in when the deadline passes


def recording_plan(configs: list[Config], chapter: str, root, device: str, executor: str, max_runs: int | None,
                   scale: str, workers: int, log=print) -> tuple[list[Config], list[list[Config]]]:
    """(the configs without a current record, validated and set to run on ``device`` with ``executor``; the jobs
    they make: run-batched groups with the batched executor, else one config each), the plan said in one line."""
    from fedlib import results
    from fedlib.experiment import lockstep_groups, validate

    have = {s.record["key"] for s in results.load(chapter, root) if not s.stale}
    diverged = results.diverged_keys(chapter, root)   # deterministic failures, not trained again
    todo = [dataclasses.replace(c, device=device, executor=executor) for c in configs
            if c.key() not in have and c.key() not in diverged]
    for cfg in todo:   # every config is checked here, before any process starts
        validate(cfg)
    batched = executor == "batched"
    jobs = [[todo[i] for i in g] for g in lockstep_groups(todo, max_runs)] if batched else [[c] for c in todo]
    known = sum(c.key() in diverged for c in configs)
    kind = device.split(":")[0]
    hours = projected_hours(configs, results.lookup(chapter, configs, root), todo, kind) if todo else None
    log(f"{chapter} at scale {scale}: {len(configs)} configs, {len(configs) - len(todo) - known} already recorded, "
        + (f"{known} recorded as diverged, " if known else "")
        + f"{len(todo)} to run on {device} ({executor}, {len(jobs)} job(s)) with {workers} worker(s)"
        + ("" if hours is None else f"; about {hours:.1f} h of training left at the recorded runs' rate per local "
                                    f"step on {kind} (about {hours / max(workers, 1):.1f} h with "
                                    f"{workers} worker(s) at once)"))
    return todo, jobs


def _run_jobs(pool, jobs: list[list[Config]], workers: int, job_args: tuple, labels: dict, start: float,
              log=print) -> dict[str, int]:
    """Feed ``jobs`` to ``pool``, ``workers`` at once, until they are done or the deadline of ``job_args``
    (``_record_job``'s arguments after the job) passes; each outcome logged. Returns the counts."""
    import time
    from concurrent.futures import FIRST_COMPLETED, wait

    deadline, batched = job_args[2], job_args[3]
    total = sum(map(len, jobs))
    counts = {"done": 0, "failed": 0, "left": 0}
    running: dict = {}
    queue = list(jobs)
    while queue or running:
        while queue and len(running) < workers and (deadline is None or time.time() < deadline):
            job = queue.pop(0)
            running[pool.submit(_record_job, job, *job_args)] = job
        if not running:
            break
        limit = None if deadline is None else max(deadline + (DEADLINE_GRACE_S if batched else 0) - time.time(), 0)
        finished, _ = wait(running, timeout=limit, return_when=FIRST_COMPLETED)
        if not finished:
            log(f"deadline: {sum(map(len, running.values()))} run(s) in flight stopped (their checkpoints resume them)")
            break
        for future in finished:
            job = running.pop(future)
            try:
                outcomes = future.result()
            except BrokenProcessPool:
                raise worker_died("records command (--workers)") from None
            except Exception as exc:
                outcomes = [("failed", f"{type(exc).__name__}: {exc}")] * len(job)
            for cfg, (status, what) in zip(job, outcomes):
                counts[status] += 1
                label = labels[cfg.key()]
                log(f"FAILED {label}: {what}" if status == "failed"
                    else f"[{counts['done']}/{total} {time.time() - start:6.0f} s] {label}: {what}")
    return counts
