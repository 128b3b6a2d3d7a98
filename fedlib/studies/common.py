"""Helpers shared by the chapters' study modules: running grids, committed paper-scale records,
provenance and the verdict box that closes each chapter."""
from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass

import numpy as np

from fedlib.experiment import Config, run, summarize_runs


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


def run_all(configs: list[Config], desc: str = "runs", progress: bool = True, store: str | None = None,
            **kwargs) -> list[dict]:
    """Run (or read from the cache) every config, with one progress bar over runs. ``store``: also
    write each record to ``results/<store>/`` (the paper-scale records the book shows)."""
    from tqdm import tqdm

    from fedlib import results

    bar = tqdm(configs, desc=desc, **({} if progress else {"disable": True}))  # TQDM_DISABLE=1 still applies
    out = []
    for c in bar:
        record = run(c, progress=False, **kwargs)
        if store:
            results.write(record, store)
        out.append(record)
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
