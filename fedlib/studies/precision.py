"""Does a lower precision change what a chapter concludes? The same recorded table in fp32 and in another
precision (``python -m fedlib records <chapter> --scale reference --precision bf16 --tables <table>``), compared
cell by cell against the seed spread, and claim by claim on the verdicts each precision's records give.

Until a chapter has this evidence its committed records stay fp32 (the records of another precision have keys of
their own and never stand in for fp32 ones)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from fedlib.studies.grid import complete_of, stored_grid
from fedlib.studies.report import fmt, interval_cell, mean_std
from fedlib.studies.verdicts import short_text, verdict_of


def in_precision(grid: dict, precision: str) -> dict:
    """A grid {cell: [configs over seeds]} with every config in ``precision``."""
    return {cell: [dataclasses.replace(c, precision=precision) for c in configs] for cell, configs in grid.items()}


@dataclasses.dataclass
class RecordedPair:
    """A grid's committed records in fp32 and in another precision, each looked up once."""
    grid: dict     # {cell: [fp32 configs]}, cut to the seeds recorded in ``precision``
    base: dict     # ``stored_grid``'s answer for ``grid``
    other: dict    # ``stored_grid``'s answer for ``grid`` in ``precision``
    precision: str

    def complete(self) -> tuple[dict | None, dict | None]:
        """(fp32 runs, other runs), each None until every cell has its seeds (``grid.complete_of``). ``other`` was
        looked up on the uncut grid, but its records are exactly at the seeds the cut keeps, so the cut grid is the
        one to check it against."""
        return (complete_of(self.grid, self.base),
                complete_of(in_precision(self.grid, self.precision), self.other))


def recorded_pair(chapter: str, grid: dict, precision: str) -> RecordedPair:
    """``grid``'s records in fp32 and ``precision``, the grid cut to the seeds that have a committed record in
    ``precision`` in some cell, so that a precision check compares like with like where fp32 has more seeds than the
    other precision (``grid`` whole where it has none)."""
    other = stored_grid(chapter, in_precision(grid, precision))
    seeds = {int(r["seed"]) for cell in other.values() for r in cell["records"]}
    if seeds:
        grid = {cell: [c for c in configs if c.seed in seeds] for cell, configs in grid.items()}
    return RecordedPair(grid, stored_grid(chapter, grid), other, precision)


def paired(base: list[dict], other: list[dict], metric: str) -> dict[int, float]:
    """{seed: 100 x (other - base)} of the last value of ``metric``, over the seeds both precisions have (the same
    seed is the same partition, initial model and mini-batch order: only the arithmetic differs)."""
    a = {int(r["seed"]): r for r in base}
    b = {int(r["seed"]): r for r in other}
    return {s: 100 * (mean_std([b[s]], metric)[0] - mean_std([a[s]], metric)[0]) for s in sorted(set(a) & set(b))}


@dataclasses.dataclass
class CellDifference:
    cell: tuple
    base: list[dict]            # fp32 records over seeds
    other: list[dict]           # the same configs' records in the other precision
    differences: dict[int, float]   # {seed: other - base} in points

    def spread(self, metric: str) -> float:
        """The fp32 records' std over seeds (points, ddof 0, as the tables print it)."""
        return 100 * mean_std(self.base, metric)[1]

    def mean(self) -> float:
        return float(np.mean(list(self.differences.values())))

    def within_spread(self, metric: str) -> bool:
        return abs(self.mean()) <= self.spread(metric)


def cell_differences(pair: RecordedPair, metric: str) -> list[CellDifference]:
    """Each cell of ``pair.grid`` with committed records in both fp32 and the other precision."""
    out = []
    for cell in pair.grid:
        a, b = pair.base[cell]["records"], pair.other[cell]["records"]
        diffs = paired(a, b, metric)
        if diffs:
            out.append(CellDifference(cell, a, b, diffs))
    return out


def difference_rows(cells: list[CellDifference], metric: str, label: Callable[[tuple], dict],
                    precision: str = "bf16") -> list[dict]:
    """One row per cell: the cell's label columns, fp32 and ``precision`` as mean ± std, the mean paired
    difference, its 95% interval over seeds, the fp32 spread and whether the difference lies within it."""
    rows = []
    for c in cells:
        v = verdict_of(c.differences)
        rows.append({**label(c.cell), "fp32": fmt(mean_std(c.base, metric)), precision: fmt(mean_std(c.other, metric)),
                     f"{precision} - fp32": round(c.mean(), 2),
                     "95% CI": interval_cell(v.interval),
                     "fp32 std": round(c.spread(metric), 2),
                     "within": "yes" if c.within_spread(metric) else "no"})
    return rows


def difference_summary(cells: list[CellDifference], metric: str, label: Callable[[tuple], dict],
                       precision: str = "bf16") -> str:
    """One sentence from the numbers: how many cells differ by less than the fp32 seed spread, the largest
    difference, the mean over all paired differences and its interval."""
    if not cells:
        return f"no cell has records in both fp32 and {precision} yet"
    within = sum(c.within_spread(metric) for c in cells)
    worst = max(cells, key=lambda c: abs(c.mean()))
    every = [d for c in cells for d in c.differences.values()]
    pooled = verdict_of(every)
    seeds = sorted({s for c in cells for s in c.differences})
    where = ", ".join(f"{k}={v}" for k, v in label(worst.cell).items())
    return (f"{within} of {len(cells)} cells: |{precision} - fp32| within the fp32 std over seeds; largest mean "
            f"difference {worst.mean():+.2f} points ({where}, fp32 std {worst.spread(metric):.2f}); over all "
            f"{len(every)} paired runs (seeds {', '.join(map(str, seeds))}) the mean difference is {pooled.mean:+.2f} "
            f"points" + (f", 95% CI [{pooled.interval[0]:+.2f}, {pooled.interval[1]:+.2f}]" if pooled.interval else ""))


def conclusion_rows(base: list, other: list, precision: str = "bf16") -> list[dict]:
    """The claims that both precisions' records assess (``claims.Assessment`` lists in the same order), side by side:
    each outcome with its deciding comparison, and whether the outcome is the same."""
    rows = []
    for a, b in zip(base, other):
        if a.claim.hypothesis or not (a.decision.compared and b.decision.compared):
            continue
        rows.append({"claim": a.claim.summary, "fp32": short_text(a), precision: short_text(b),
                     "same outcome": "yes" if a.outcome == b.outcome else "no"})
    return rows
