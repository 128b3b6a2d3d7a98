"""run(config) -> result record, with the result cache and resume; run_many: many configs per batched step."""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from fedlib.errors import TrainingDiverged, check
from fedlib.experiment.config import DEFAULT_CACHE, PARTICIPATION_FIELDS, Config, validate
from fedlib.experiment.records import (
    atomic_json,
    cache_lock,
    code_version,
    lock_or_none,
    read_cached_record,
    record_of,
)
from fedlib.experiment.wiring import build, load_data


def run(cfg: Config, cache_dir: str | os.PathLike | None = DEFAULT_CACHE, progress: bool = True,
        callbacks=(), desc: str = "") -> dict:
    """Run one configuration (one seed) and return its result record.

    With a cache directory, a finished config is read back from ``<cache>/<key>.json`` and an
    interrupted one resumes from ``<cache>/<key>.ckpt``."""
    validate(cfg)
    check_run_options(cache_dir, callbacks)
    if cache_dir is None:
        return _run(cfg, None, None, progress, callbacks, desc)
    key = cfg.key()
    with cache_lock(Path(cache_dir) / f"{key}.lock"):
        record_path = Path(cache_dir) / f"{key}.json"
        record = None if callbacks else read_cached_record(record_path)
        return record or _run(cfg, record_path, Path(cache_dir) / f"{key}.ckpt", progress, callbacks, desc)


def check_run_options(cache_dir, callbacks) -> None:
    """A cache folder that is a folder's name (not "", which would write into the current folder), and callbacks
    that can be called: each refused in one line before anything runs."""
    check(cache_dir is None or (isinstance(cache_dir, (str, os.PathLike)) and str(cache_dir).strip() != ""),
          "cache_dir", cache_dir, "a folder path, or None for no cache")
    check(isinstance(callbacks, (list, tuple)) and all(callable(c) for c in callbacks), "callbacks", callbacks,
          "a list of functions, each called with every evaluated row")


def trained(cfg: Config, cache_dir: str | os.PathLike | None = DEFAULT_CACHE, progress: bool = False):
    """The trained Federation of ``cfg`` (clients' models and state, the server, the final confusions), for
    figures that look inside models. Its final state is kept in the cache as ``<key>.model`` (the engine's
    checkpoint format), so a second call loads it instead of training; an interrupted first call resumes."""
    validate(cfg)
    if cache_dir is None:
        return run_in_process(cfg, progress=progress)
    key = cfg.key()
    with cache_lock(Path(cache_dir) / f"{key}.lock"):
        artifact = Path(cache_dir) / f"{key}.model"
        fed = build(cfg, progress=progress, checkpoint=artifact, desc=f"{cfg.method} seed {cfg.seed}")
        fed.run()              # resumes from the artifact: nothing is left to train once it is complete
        fed.flush(cfg.rounds)  # the final state, if this call trained it
        return fed


def _run(cfg: Config, record_path: Path | None, checkpoint: Path | None, progress: bool, callbacks, desc: str) -> dict:
    desc = desc or f"{cfg.method} seed {cfg.seed}"
    started = time.time()
    code_version()   # read as the run starts (once per process): a commit made while it trains does not relabel it
    fed = engine_runner(cfg.engine)(cfg, checkpoint=checkpoint, progress=progress, desc=desc, callbacks=callbacks)
    record = record_of(cfg, fed, started)
    if record_path is not None and checkpoint is not None:
        from fedlib.engine.loop import remove_checkpoint

        if "left_out" not in record:   # a run that went on without some clients is not the config's result
            atomic_json(record_path, record)
        remove_checkpoint(checkpoint)
    return record


def run_in_process(cfg: Config, *, checkpoint=None, progress: bool = False, desc: str = "", callbacks=()):
    """The in-process engine: every client trained here by ``cfg.executor``; the finished Federation."""
    fed = build(cfg, progress=progress, checkpoint=checkpoint, desc=desc)
    fed.on_round.extend(callbacks)
    fed.run()
    return fed


# the engines a config's ``engine`` names: "module:function" loaded when first used, so an engine that needs
# an optional extra (Flower) is imported only by the runs that use it, and this layer imports no engine above it
ENGINE_RUNNERS = {"inprocess": "fedlib.experiment.runner:run_in_process", "flower": "fedlib.flower:simulate"}


def engine_runner(name: str):
    module, function = ENGINE_RUNNERS[name].split(":")
    return getattr(importlib.import_module(module), function)


# ---------------------------------------------------------------------- many runs in one batched step
# fields that may differ between runs trained in one step: what the engine does per run (sampling, server,
# evaluation, length); every other field (method and hyperparameters, model, data, optimiser, lr, epochs,
# batch size, device) is shared
PER_RUN_FIELDS = ("seed", "partition", "num_clients", "rounds", "eval_every", "fraction", "global_test_size",
                  "eval_personal_global", "metrics", "eval_clients", "average_global", "eval_finetune_epochs",
                  *PARTICIPATION_FIELDS)


# run-batched runs write their checkpoints at most this often (and when they stop): a round of many runs
# is short on a GPU, and every client's model of every run written each round would dominate it
LOCKSTEP_CHECKPOINT_S = 60.0


def lockstep_key(cfg: Config) -> str:
    """Configs with the same key can train in one batched step (``run_many``)."""
    shared = {k: v for k, v in cfg.flat().items() if k not in PER_RUN_FIELDS}
    shared["hyper"] = dataclasses.asdict(cfg.built_method().hp)
    return json.dumps(shared, sort_keys=True, default=str)


def lockstep_groups(configs: list[Config], max_runs: int | None = None) -> list[list[int]]:
    """Positions of ``configs`` grouped by ``lockstep_key`` (in first-seen order), each group cut into
    pieces of at most ``max_runs``."""
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(lockstep_key(cfg), []).append(i)
    size = max_runs or max(map(len, groups.values()), default=1)
    return [g[a:a + size] for g in groups.values() for a in range(0, len(g), size)]


def run_many(configs: list[Config], cache_dir: str | os.PathLike = DEFAULT_CACHE, progress: bool = True,
             max_runs: int | None = None, deadline: float | None = None, on_record=None) -> list:
    """Run many configurations with the batched executor, several runs per vmapped step: configs that share
    everything but ``PER_RUN_FIELDS`` advance round by round together (``fedlib.engine.lockstep``), at most
    ``max_runs`` at once. Every run reads and writes its own cache entry and checkpoint, as ``run`` does, and
    resumes from it. Returns per config its record, the exception that ended it (divergence, a failing hook),
    or None where it did not finish (``deadline``: time.time() after which no round starts; or another
    process holds its lock). ``on_record(config, record)`` is called as each run finishes."""
    check(isinstance(cache_dir, (str, os.PathLike)) and str(cache_dir).strip() != "", "cache_dir", cache_dir,
          "a folder path (run_many keeps each run's record and checkpoint there)")
    every = [dataclasses.replace(c, executor="batched") for c in configs]
    for cfg in every:
        validate(cfg)
    # a config given twice runs once and is returned at both places (its second copy met its own lock)
    first: dict[str, Config] = {}
    for cfg in every:
        first.setdefault(cfg.key(), cfg)
    distinct = list(first.values())
    out: list = [None] * len(distinct)
    for group in lockstep_groups(distinct, max_runs):
        if deadline is not None and time.time() >= deadline:
            break
        _run_group([distinct[i] for i in group], group, out, cache_dir, progress, deadline, on_record)
    found = {cfg.key(): result for cfg, result in zip(distinct, out)}
    return [found[cfg.key()] for cfg in every]


def _run_group(cfgs: list[Config], positions: list[int], out: list, cache_dir, progress: bool, deadline, on_record):
    import fcntl

    from fedlib.engine.batched import BatchedTrainer
    from fedlib.engine.executors import BatchedExecutor
    from fedlib.engine.lockstep import Lockstep
    from fedlib.engine.loop import remove_checkpoint
    from fedlib.models import build_model

    cache = Path(cache_dir)
    started = time.time()
    with contextlib.ExitStack() as stack:
        todo = []
        for cfg, pos in zip(cfgs, positions):
            key = cfg.key()
            lock = stack.enter_context(lock_or_none(cache / f"{key}.lock", fcntl))
            if lock is None:   # another process trains this config; its record appears in the cache
                continue
            record = read_cached_record(cache / f"{key}.json")
            if record is not None:
                out[pos] = record
                if on_record:
                    on_record(cfg, record)
                continue
            todo.append((cfg, pos))
        if not todo:
            return
        first = todo[0][0]
        data = load_data(first).to(first.device)
        if not BatchedTrainer.supports(build_model(first.model, data.input_shape, data.num_classes, first.dataset)):
            stack.close()   # models with buffers (BatchNorm) train one run at a time; run() takes each lock itself
            for cfg, pos in todo:
                try:
                    out[pos] = run(cfg, cache_dir=cache, progress=progress)
                except TrainingDiverged as exc:
                    out[pos] = exc
                    continue
                if on_record:
                    on_record(cfg, out[pos])
            return
        if data.train_x.ndim == 4:   # the layout every trainer uses: one tensor shared by all runs
            data = dataclasses.replace(data, train_x=data.train_x.contiguous(memory_format=torch.channels_last))
        method = first.built_method()
        shared: dict = {}

        def executor(setup, trainer, **_):
            if "batched" not in shared:
                shared["batched"] = BatchedTrainer.like(trainer)
            return BatchedExecutor(setup, trainer, batched=shared["batched"])

        feds = []
        for cfg, _ in todo:
            fed = build(cfg, progress=progress, checkpoint=cache / f"{cfg.key()}.ckpt",
                        desc=f"{cfg.method} seed {cfg.seed}", executor=executor, data=data, method=method)
            fed.runs_batched = len(todo)
            fed.checkpoint_every_s = LOCKSTEP_CHECKPOINT_S
            feds.append(fed)
        where = {id(f): (cfg, pos) for f, (cfg, pos) in zip(feds, todo)}

        def on_end(member):
            cfg, pos = where[id(member.federation)]
            if member.error is not None:
                out[pos] = member.error
                return
            record = record_of(cfg, member.federation, started)
            atomic_json(cache / f"{cfg.key()}.json", record)
            remove_checkpoint(cache / f"{cfg.key()}.ckpt")
            out[pos] = record
            if on_record:
                on_record(cfg, record)

        Lockstep(feds, shared["batched"]).run(on_end=on_end, deadline=deadline)


def run_seeds(cfg: Config, seeds, **kwargs) -> list[dict]:
    return [run(dataclasses.replace(cfg, seed=int(s)), **kwargs) for s in seeds]


SUMMARY_METRICS = ("personal_local_acc", "personal_local_f1", "global_acc", "personal_global_acc")


def summarize_runs(records: list[dict], metrics=SUMMARY_METRICS, last: int = 1) -> dict[str, tuple[float, float, int]]:
    """mean, std and number of seeds of each metric; per seed the metric is the last evaluated value
    (``last`` > 1: the mean of the last ``last`` evaluations)."""
    seen = [r["key"] for r in records if r.get("key")]   # a config's key names its seed too
    check(len(set(seen)) == len(seen), "records", sorted({k for k in seen if seen.count(k) > 1}),
          "records of distinct runs (one run given twice would count as two seeds)")
    out = {}
    for metric in metrics:
        values = []
        for r in records:
            evals = [row[metric] for row in r["history"] if metric in row]
            if evals:
                values.append(float(np.mean(evals[-last:])))
        if values:
            out[metric] = (float(np.mean(values)), float(np.std(values)), len(values))
    return out
