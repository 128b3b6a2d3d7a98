"""Helpers shared by the chapters' study modules: running grids, committed paper-scale records,
provenance and the verdict box that closes each chapter."""
from __future__ import annotations

import dataclasses
import html
import json
from dataclasses import dataclass

import numpy as np

from fedlib.errors import check
from fedlib.experiment import Config, read_cached_record, run, summarize_runs

RUNTIME = {"device": "cpu", "executor": "sequential"}


def set_runtime(device: str = "auto", executor: str = "auto") -> dict:
    """Where the chapter's runs execute (not part of any result's key). "auto": a CUDA device with the
    batched executor when one is visible, else the CPU with the sequential executor."""
    import torch

    cuda = torch.cuda.is_available()
    RUNTIME["device"] = ("cuda" if cuda else "cpu") if device == "auto" else device
    RUNTIME["executor"] = ("batched" if RUNTIME["device"].startswith("cuda") else "sequential") \
        if executor == "auto" else executor
    return dict(RUNTIME)


def method_labels(names, **overrides: str) -> dict[str, str]:
    """Each method's label (its class's ``label``), or the name a chapter's paper uses for it."""
    from fedlib.methods import METHODS as REGISTERED

    return {n: overrides.get(n, REGISTERED[n].label) for n in names}


def _run_one(cfg: Config, kwargs: dict) -> dict:
    return run(cfg, progress=False, **kwargs)


def _single_thread():
    import os

    import torch

    from fedlib.engine.executors import worker_process_setup

    worker_process_setup()
    os.environ["TQDM_DISABLE"] = "1"
    torch.set_num_threads(1)


_POOL: dict = {}


def _pool(workers: int):
    """One pool of single-threaded worker processes per session, reused by every grid."""
    import atexit
    from concurrent.futures import ProcessPoolExecutor

    import torch

    from fedlib.engine.executors import _main_script_hidden

    if _POOL.get("workers") != workers:
        if _POOL.get("pool") is not None:
            _POOL["pool"].shutdown(cancel_futures=True)
        with _main_script_hidden(True):
            pool = ProcessPoolExecutor(workers, mp_context=torch.multiprocessing.get_context("spawn"),
                                       initializer=_single_thread)
            for f in [pool.submit(int, 0) for _ in range(workers)]:
                f.result()   # start the workers now, while the main script is hidden
        _POOL.update(pool=pool, workers=workers)
        if not _POOL.get("atexit"):
            atexit.register(lambda: _POOL.get("pool") and _POOL["pool"].shutdown(cancel_futures=True))
            _POOL["atexit"] = True
    return _POOL["pool"]


def default_workers() -> int:
    """Runs on the CPU are small enough that two single-threaded runs at once beat one run on two
    threads (FedGPA at book scale: 1.7x the throughput on 2 cores); a GPU runs one at a time."""
    import os

    return 1 if RUNTIME["device"] != "cpu" else max(1, min(len(os.sched_getaffinity(0)), 8))


def run_all(configs: list[Config], desc: str = "runs", progress: bool = True, store: str | None = None,
            workers: int | None = None, **kwargs) -> list[dict]:
    """Run (or read from the cache) every config, with one progress bar over runs. Uncached runs are
    spread over ``workers`` single-threaded processes (default: one per CPU core on the CPU, none on a
    GPU). ``store``: also write each record to ``results/<store>/`` (the paper-scale records the book
    shows)."""
    from concurrent.futures import as_completed
    from pathlib import Path

    from tqdm import tqdm

    from fedlib import results
    from fedlib.experiment import DEFAULT_CACHE

    workers = default_workers() if workers is None else workers
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
        pool = _pool(workers)
        futures = {pool.submit(_run_one, configs[idx[0]], kwargs): idx for idx in pending.values()}
        try:
            for future in as_completed(futures):
                for i in futures[future]:
                    out[i] = future.result()
                bar.update(len(futures[future]))
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    else:
        for idx in pending.values():
            record = _run_one(configs[idx[0]], kwargs)
            for i in idx:
                out[i] = record
            bar.update(len(idx))
    bar.close()
    if store:
        for record in out:
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


def with_seeds(cfg: Config, seeds) -> list[Config]:
    return [dataclasses.replace(cfg, seed=s) for s in seeds]


def mean_std(records: list[dict], metric: str = "personal_local_acc") -> tuple[float, float, int]:
    """(mean, population std, number of seeds) of the last evaluated value of ``metric``."""
    return summarize_runs(records, metrics=(metric,))[metric]


def fmt(ms) -> str:
    """'mean ± std' in %, or just the mean for a single seed."""
    mean, std, n = ms
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if n > 1 else f"{100 * mean:.2f}"


# ---------------------------------------------------------------------- committed records
def stored_grid(chapter: str, grid: dict, root=None) -> dict:
    """For a grid {cell: [configs over seeds]}: the committed records of each cell (current ones only)
    and the cells that have stale records. Returns {cell: {"records": [...], "stale": n, "missing": n}}."""
    from fedlib import results

    flat = [c for configs in grid.values() for c in configs]
    found = iter(results.lookup(chapter, flat, root or results.RESULTS))
    out = {}
    for cell, configs in grid.items():
        hits = [next(found) for _ in configs]
        out[cell] = {"records": [h.record for h in hits if h is not None and not h.stale],
                     "stale": sum(1 for h in hits if h is not None and h.stale),
                     "missing": sum(1 for h in hits if h is None)}
    return out


def provenance(records: list[dict]) -> dict:
    """Where, when and with which code a set of records was made."""
    if not records:
        return {}
    wall = sum(r.get("wall_time_s", 0.0) for r in records)
    dates = sorted(r.get("finished_at", "")[:10] for r in records)
    return {"runs": len(records), "devices": sorted({r.get("device", "?") for r in records}),
            "executors": sorted({r.get("executor", "sequential") for r in records}),
            "code": sorted({r.get("code_version", "?") for r in records}),
            "dates": f"{dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else dates[0],
            "wall time": f"{wall / 3600:.1f} h" if wall > 3600 else f"{wall:.0f} s"}


# ---------------------------------------------------------------------- results tables
def records_in(*groups) -> list[dict]:
    """Every run record inside lists, tuples and dicts of records (nested as the chapters keep them)."""
    out: list[dict] = []

    def walk(x):
        if isinstance(x, dict) and "config" in x and "final" in x:
            out.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    for g in groups:
        walk(g)
    unique = {id(r): r for r in out}
    return list(unique.values())


def _model_name(cfg: dict) -> str:
    from fedlib.models import DEFAULT_MODEL

    if cfg.get("model"):
        return cfg["model"]
    return "projection" if cfg.get("backbones") else DEFAULT_MODEL.get(cfg.get("dataset") or "", "cnn2")


def _listed(values, limit: int = 3) -> str:
    def order(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    values = sorted({str(v) for v in values}, key=order)
    return ", ".join(values) if len(values) <= limit else f"{', '.join(values[:limit])} and {len(values) - limit} more"


def provenance_line(records: list[dict], scale: str, test_set: str) -> str:
    """One line saying what a results table is made of: scale, data, model, test set, seeds and how the
    spread is computed, code version, device, wall time."""
    if not records:
        return f"scale {scale}; no runs"
    cfgs = [r["config"] for r in records]
    seeds = sorted({int(r["seed"]) for r in records})
    spread = "one seed, no spread" if len(seeds) == 1 else f"mean ± population std (ddof 0) over {len(seeds)} seeds"
    wall = sum(r.get("wall_time_s", 0.0) for r in records)
    wall_s = f"{wall / 3600:.1f} h" if wall > 3600 else f"{wall / 60:.1f} min" if wall > 120 else f"{wall:.0f} s"
    return (
        f"scale {scale}; data {_listed(c['dataset'] for c in cfgs)}; model {_listed(_model_name(c) for c in cfgs)}; "
        f"{_listed(c['num_clients'] for c in cfgs)} clients, {_listed(c['rounds'] for c in cfgs)} rounds; "
        f"test: {test_set}; seeds {_listed(seeds, 5)}: {spread}; "
        f"code {_listed(r.get('code_version', '?') for r in records)}; "
        f"device {_listed(r.get('device', '?') for r in records)}; {len(records)} runs, {wall_s} of training"
    )


def _cell(v) -> str:
    """The book's one number format: two decimals for measured or quoted percentages, plain integers."""
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return str(v)


class ResultsTable:
    """A results table as the book shows it: no index column, one number format, at most ``max_columns``
    columns per part (wider tables are split, the first ``keys`` columns repeated), and a provenance line."""

    def __init__(self, table, records=(), scale: str = "", test_set: str = "", note: str = "",
                 keys: int = 1, max_columns: int = 6):
        import pandas as pd

        df = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
        if isinstance(df.columns, pd.MultiIndex):
            df = df.copy()
            names = df.columns.names
            df.columns = [" ".join(str(v) if name is None else f"{name}={v}" for name, v in zip(names, col) if str(v))
                          for col in df.columns]
        if not isinstance(df.index, pd.RangeIndex) or df.index.name is not None:
            keys = max(keys, df.index.nlevels)
            df = df.reset_index()
        self.df = df.map(_cell)
        self.df.columns.name = None
        self.records = records_in(records)
        self.keys, self.max_columns = keys, max_columns
        self.caption = provenance_line(self.records, scale, test_set) if self.records else ""
        self.note = note

    def parts(self) -> list:
        cols = list(self.df.columns)
        key, rest = cols[:self.keys], cols[self.keys:]
        width = max(1, self.max_columns - len(key))
        return [self.df[key + rest[i:i + width]] for i in range(0, max(len(rest), 1), width)]

    def _repr_html_(self) -> str:
        tables = "".join(part.to_html(index=False, escape=True, border=0, classes="results")
                         for part in self.parts())
        lines = "".join(f"<p class='provenance'>{html.escape(t)}</p>" for t in (self.note, self.caption) if t)
        return f"<div class='results-table'>{tables}{lines}</div>"

    def __repr__(self) -> str:
        text = "\n\n".join(part.to_string(index=False) for part in self.parts())
        return "\n".join(t for t in (text, self.note, self.caption) if t)


def show_table(table, records=(), scale: str = "", test_set: str = "", note: str = "", keys: int = 1,
               max_columns: int = 6) -> None:
    """Display a results table with its provenance (see ``ResultsTable``)."""
    from IPython.display import display

    shown = ResultsTable(table, records, scale, test_set, note, keys, max_columns)
    display(shown)


def report_stored(stored: dict, grid: str = "") -> list[dict]:
    """Print how much of a paper-scale grid has committed records (``stored_grid``'s answer) and where,
    when and with which code they were made; return the current records."""
    found = [r for cell in stored.values() for r in cell["records"]]
    stale = sum(c["stale"] for c in stored.values())
    missing = sum(c["missing"] for c in stored.values())
    print(f"committed paper-scale records{f' ({grid})' if grid else ''}: {len(found)} current, {stale} stale, "
          f"{missing} missing of {len(found) + stale + missing}")
    if found:
        p = provenance(found)
        print(f"made on {', '.join(p['devices'])} ({', '.join(p['executors'])} executor), {p['dates']}, "
              f"code {', '.join(p['code'])}: {p['runs']} runs, {p['wall time']} of device time")
    else:
        print("No paper-scale run has been recorded yet: the grid needs a GPU; the book shows the records "
              "as soon as they are committed.")
    return found


# ---------------------------------------------------------------------- verdicts
@dataclass
class Claim:
    claim: str                     # what the paper says, in a sentence
    paper: str                     # the paper's evidence (table/figure, numbers)
    ours: str                      # our numbers
    holds: bool | None             # None: cannot be checked here
    note: str = ""


def verdict_html(claims: list[Claim], scale_note: str) -> str:
    """The verdict box closing a chapter: each claim, whether it holds here, with the numbers."""
    mark = {True: ("holds here", "yes"), False: ("does not hold here", "no"), None: ("not checked", "na")}
    rows = "".join(
        f"<tr><td>{html.escape(c.claim)}</td><td>{html.escape(c.paper)}</td><td>{html.escape(c.ours)}"
        f"{'<br><em>' + html.escape(c.note) + '</em>' if c.note else ''}</td>"
        f"<td class='verdict-{mark[c.holds][1]}'>{mark[c.holds][0]}</td></tr>" for c in claims)
    held = sum(1 for c in claims if c.holds)
    return (f"<div class='verdict'><p><strong>Verdict per claim</strong> ({html.escape(scale_note)}): "
            f"{held} of {len(claims)} claims hold here.</p><table><thead><tr><th>claim</th><th>paper</th>"
            f"<th>ours</th><th>verdict</th></tr></thead><tbody>{rows}</tbody></table></div>")


def ordered(values: list[float]) -> bool:
    """Strictly increasing."""
    return all(b > a for a, b in zip(values, values[1:]))


def entropy_rows(W) -> float:
    """Mean over rows of the entropy (nats) of a row-stochastic matrix."""
    W = np.asarray(W, dtype=float)
    return float((-(W * np.log(np.where(W > 0, W, 1))).sum(1)).mean())


# ---------------------------------------------------------------------- recording a paper-scale grid
def paper_grid(tables: dict, seeds=None, only=None) -> list[Config]:
    """A chapter's paper-scale configs in the order the ``records`` command fills them: ``tables``
    ({table: {cell: [configs over seeds]}}, the headline table first) one table after the other, each
    seed by seed (a partial run still fills whole tables, one seed at a time). ``seeds``: run exactly these
    seeds in every table instead of each table's own; ``only``: these tables. A config that two tables
    share (e.g. an ablation's full model) is listed once."""
    if only is not None:
        unknown = [t for t in only if t not in tables]
        check(not unknown, "tables", ", ".join(unknown), f"tables of this chapter: {', '.join(tables)}")
    out: dict[str, Config] = {}
    for name, grid in tables.items():
        if only is not None and name not in only:
            continue
        cells = [configs for configs in grid.values()]
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
                cache_dir) -> list[tuple]:
    """In a worker process: train ``configs`` (one run-batched group, or one config) with the cache's
    checkpoints (a later call resumes them), write each finished record to ``results/<chapter>/``; returns
    per config (status, what to log): "done" with its final accuracies, "failed" with the error, "left"."""
    from fedlib import results
    from fedlib.experiment import run_many

    if batched:
        outcomes = run_many(configs, cache_dir=cache_dir, progress=False, deadline=deadline)
    else:
        outcomes = []
        for cfg in configs:
            try:
                outcomes.append(run(cfg, cache_dir=cache_dir, progress=False))
            except Exception as exc:
                outcomes.append(exc)
    out = []
    for outcome in outcomes:
        if isinstance(outcome, dict):
            results.write(outcome, chapter, root)
            accs = {k: round(v, 4) for k, v in outcome["final"].items() if k.endswith("_acc")}
            out.append(("done", f"{outcome['wall_time_s']:.0f} s, final {json.dumps(accs)}"))
        elif isinstance(outcome, BaseException):
            out.append(("failed", f"{type(outcome).__name__}: {outcome}"))
        else:
            out.append(("left", "stopped at the deadline; its checkpoint resumes it"))
    return out


def record_grid(configs: list[Config], chapter: str, workers: int = 1, deadline_s: float | None = None,
                device: str = "cuda", executor: str = "batched", root=None, log=print,
                max_runs: int | None = None, cache_dir=None) -> dict:
    """Run every config that has no current record under ``results/<chapter>/`` and write its record.

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
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import torch

    from fedlib import results
    from fedlib.experiment import DEFAULT_CACHE, lockstep_groups, validate

    start = time.time()
    cache_dir = cache_dir or DEFAULT_CACHE
    deadline = None if deadline_s is None else start + deadline_s
    root = root or results.RESULTS
    have = {s.record["key"] for s in results.load(chapter, root) if not s.stale}
    todo = [dataclasses.replace(c, device=device, executor=executor) for c in configs if c.key() not in have]
    for cfg in todo:   # every config is checked here, before any process starts
        validate(cfg)
    batched = executor == "batched"
    jobs = [[todo[i] for i in g] for g in lockstep_groups(todo, max_runs)] if batched else [[c] for c in todo]
    log(f"{chapter}: {len(configs)} configs, {len(configs) - len(todo)} already recorded, {len(todo)} to run "
        f"on {device} ({executor}, {len(jobs)} job(s)) with {workers} worker(s)")
    counts = {"done": 0, "failed": 0, "left": 0}
    pool = ProcessPoolExecutor(workers, mp_context=torch.multiprocessing.get_context("spawn"),
                               initializer=_gpu_worker_setup)
    running: dict = {}
    queue = list(jobs)
    try:
        while queue or running:
            while queue and len(running) < workers and (deadline is None or time.time() < deadline):
                job = queue.pop(0)
                running[pool.submit(_record_job, job, chapter, root, deadline, batched, cache_dir)] = job
            if not running:
                break
            limit = None if deadline is None else max(deadline + (DEADLINE_GRACE_S if batched else 0) - time.time(), 0)
            finished, _ = wait(running, timeout=limit, return_when=FIRST_COMPLETED)
            if not finished:
                in_flight = sum(map(len, running.values()))
                log(f"deadline: {in_flight} run(s) in flight stopped (their checkpoints resume them)")
                break
            for future in finished:
                job = running.pop(future)
                try:
                    outcomes = future.result()
                except Exception as exc:
                    outcomes = [("failed", f"{type(exc).__name__}: {exc}")] * len(job)
                for cfg, (status, what) in zip(job, outcomes):
                    counts[status] += 1
                    label = f"{cfg.method} {cfg.hyper or ''} seed {cfg.seed}"
                    if status == "failed":
                        log(f"FAILED {label}: {what}")
                    else:
                        log(f"[{counts['done']}/{len(todo)} {time.time() - start:6.0f} s] {label}: {what}")
    finally:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
    return {"done": counts["done"], "failed": counts["failed"], "skipped": len(configs) - len(todo),
            "left": len(todo) - counts["done"] - counts["failed"], "wall_s": time.time() - start}


DEADLINE_GRACE_S = 90.0   # a run-batched group finishes the round it is in when the deadline passes


def _gpu_worker_setup():
    import os

    import torch

    os.environ["TQDM_DISABLE"] = "1"
    torch.set_num_threads(1)


# ---------------------------------------------------------------------- the book's results overview
def summary_path(chapter: str, scale: str):
    from fedlib.experiment import DEFAULT_CACHE

    return DEFAULT_CACHE / "summaries" / f"{chapter}-{scale}.json"


def save_summary(chapter: str, scale: str, headline: tuple[str, list[dict]] | None = None,
                 claims: list[Claim] | None = None, scale_note: str = "", provenance: str = "") -> None:
    """Leave what the book's results overview shows of a chapter: its headline table (title, rows with
    ours beside the paper, the table's provenance line) and its claims with their verdicts, at one scale."""
    import time

    from fedlib.experiment import atomic_json, code_version

    path = summary_path(chapter, scale)
    data = read_cached_record_like(path)
    data.update({"chapter": chapter, "scale": scale, "code_version": code_version(),
                 "saved_at": time.strftime("%Y-%m-%d %H:%M")})
    if headline is not None:
        data["headline"] = {"title": headline[0], "rows": headline[1], "provenance": provenance}
    if claims is not None:
        data["claims"] = [dataclasses.asdict(c) for c in claims]
        data["scale_note"] = scale_note
    atomic_json(path, data)


def read_cached_record_like(path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load_summaries(chapters, scale: str) -> dict:
    """chapter -> its saved summary at ``scale`` (chapters not run at that scale are left out)."""
    out = {}
    for chapter in chapters:
        data = read_cached_record_like(summary_path(chapter, scale))
        if data:
            out[chapter] = data
    return out
