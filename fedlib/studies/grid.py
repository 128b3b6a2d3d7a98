"""Running the chapters' grids: where runs execute (``Runtime``), a worker pool for a page's grids, a chapter's
budgets (``Budget``, ``Scales``) and the committed records of a grid. Recording a list of configs into the committed
records is ``fedlib.recording`` (``python -m fedlib records``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from fedlib.engine.workers import POOLS, collecting, completed
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
    from fedlib.claims import DECIDING_SEEDS

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
