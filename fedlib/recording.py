"""Recording configs into the committed records (``python -m fedlib records``): the order a chapter's tables are
filled in (``recording_order``), the plan and its projected hours, and ``record_grid``: worker processes, checkpoints
that resume, a deadline, each finished record written under ``results/<chapter>/``. Not a book concern: the book's
chapters hand it their tables."""
from __future__ import annotations

import dataclasses
import json
from concurrent.futures.process import BrokenProcessPool

from fedlib.engine.workers import worker_died
from fedlib.errors import check
from fedlib.experiment import Config, run


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
