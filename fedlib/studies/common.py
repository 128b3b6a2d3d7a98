"""Helpers shared by the chapters' study modules."""
from __future__ import annotations

import dataclasses

from fedlib.experiment import Config, run, summarize_runs


def run_all(configs: list[Config], desc: str = "runs", progress: bool = True, **kwargs) -> list[dict]:
    """Run (or read from the cache) every config, with one progress bar over runs."""
    from tqdm import tqdm

    bar = tqdm(configs, desc=desc, **({} if progress else {"disable": True}))  # TQDM_DISABLE=1 still applies
    return [run(c, progress=False, **kwargs) for c in bar]


def with_seeds(cfg: Config, seeds) -> list[Config]:
    return [dataclasses.replace(cfg, seed=s) for s in seeds]


def mean_std(records: list[dict], metric: str = "personal_local_acc") -> tuple[float, float, int]:
    """(mean, std, number of seeds) of the last evaluated value of ``metric``."""
    return summarize_runs(records, metrics=(metric,))[metric]


def fmt(ms) -> str:
    """'mean ± std' in %, or just the mean for a single seed."""
    mean, std, n = ms
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if n > 1 else f"{100 * mean:.2f}"
