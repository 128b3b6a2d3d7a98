"""Has a reference budget converged? Every chapter with a reference scale records its paper's method and main
baseline at 3x the reference rounds (seeds 0-2; the ``convergence`` table of ``tables("reference")``, built by
``grid.convergence_grid`` from cells of its headline table). This module reads those runs beside the reference
runs of the same configs, paired by seed: says per method whether the endpoint moved beyond 1 point or the seed
spread (the mean over the seeds that have both runs), gives the paper's method's margin over its baseline at both
budgets, and draws the curves (seed 0) with the reference budget marked."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fedlib.plots import chance_line, floor_line
from fedlib.recording import projected_hours, recording_order
from fedlib.studies.grid import stored_grid
from fedlib.studies.report import convergence_gap, interval_cell, majority_floor, per_seed
from fedlib.studies.verdicts import listed, verdict_of


def convergence_runs(chapter: str, longer_grid: dict, factor: int = 3) -> tuple[dict, dict]:
    """({label: records of the reference configs}, {label: records of the 3x runs}) of the chapter's ``convergence``
    grid {label: [configs at factor x the reference rounds, over seeds]}: the reference configs are the same ones at
    1/factor of the rounds, every seed the committed records have."""
    reference_grid = {label: [dataclasses.replace(c, rounds=c.rounds // factor) for c in cfgs]
                      for label, cfgs in longer_grid.items()}
    reference, longer = stored_grid(chapter, reference_grid), stored_grid(chapter, longer_grid)
    return ({label: c["records"] for label, c in reference.items()},
            {label: c["records"] for label, c in longer.items()})


@dataclass(frozen=True)
class Settling:
    """One method's endpoint at the reference budget R and at 3R, means over the seeds that have both runs: numbers,
    which ``row`` shows. ``gap``: 3R - R (points); ``interval``: its 95% t-interval over the seeds (None at one
    seed); ``spread``: the reference's std over all its seeds (points); ``paper``: the mean at the paper's budget
    (round ``paper_round``) over the same seeds, where a chapter reads it and each of them has one."""
    method: str
    seeds: tuple[int, ...]
    rounds: tuple[int, int]
    reference: float
    longer: float
    gap: float
    interval: tuple[float, float] | None
    spread: float
    paper: float | None = None
    paper_round: int | None = None

    @property
    def bound(self) -> float:
        """How far the endpoint may move and still count as settled: 1 point or the reference's seed spread (one
        seed: 1 point)."""
        return max(1.0, self.spread if self.spread == self.spread else 0.0)

    @property
    def moves(self) -> bool:
        """Does the endpoint still move: its gap beyond 1 point or the seed spread?"""
        return abs(self.gap) > self.bound

    def averaged_over(self) -> str:
        """Which seeds the numbers are read at: "mean over seeds 0, 1 and 2", or "seed 0"."""
        seeds = listed(map(str, self.seeds))
        return f"mean over seeds {seeds}" if len(self.seeds) > 1 else f"seed {seeds}"

    def row(self) -> dict:
        """The row the convergence table shows."""
        R, far = self.rounds
        paper = {} if self.paper_round is None else {
            f"round {self.paper_round} (paper)": None if self.paper is None else round(self.paper, 2)}
        return {"method": self.method, "seeds": listed(map(str, self.seeds)),
                f"round {R} (reference)": round(self.reference, 2), f"round {far} (3x)": round(self.longer, 2),
                **paper, f"gap {far} - {R}": round(self.gap, 2),
                "95% interval of the gap": interval_cell(self.interval),
                "reference std over seeds": round(self.spread, 2)}


def settlings(reference: dict, longer: dict, metric: str, labels: dict) -> list[Settling]:
    """Per label with a reference record and its 3x run at one seed or more: the metric (%) at the reference budget
    and at 3x its rounds (``Settling``). ``labels``: {label: how the table names it}."""
    out = []
    for label, recs in reference.items():
        gap = convergence_gap(recs, longer.get(label, []), metric)
        if gap is None:
            continue
        method = label[0] if isinstance(label, tuple) else label   # a cell key (method, setting, ...) names its method
        out.append(Settling(labels.get(label, labels.get(method, str(label))), tuple(gap["seeds"]), gap["rounds"],
                            gap["reference"], gap["longer"], gap["gap"], verdict_of(gap["gaps"]).interval,
                            gap["spread"]))
    return out


def seed_zero(records: list[dict]) -> dict | None:
    return next((r for r in records if int(r["seed"]) == 0), None)


def budget_margins(reference: dict, longer: dict, metric: str) -> tuple[dict, dict]:
    """The paper's method's margin over its main baseline (the grid's first two labels; points of ``metric`` at the
    last evaluation), paired by seed, at the reference budget and at 3x its rounds: ({seed: margin at R}, {seed:
    margin at 3R}) over the seeds that have all four runs."""
    if len(reference) < 2:
        return {}, {}
    own, base = list(reference)[:2]
    ends = [per_seed(runs.get(label, []), metric) for runs in (reference, longer) for label in (own, base)]
    seeds = sorted(set.intersection(*(set(e) for e in ends)))
    return ({s: ends[0][s] - ends[1][s] for s in seeds}, {s: ends[2][s] - ends[3][s] for s in seeds})


STANDING = {"holds": "ahead", "does not hold": "behind", "inconclusive": "not separated"}   # a margin's interval


def margins_text(margins: tuple[dict, dict], rounds: tuple[int, int], own: str, base: str) -> str:
    """``budget_margins`` in words, with each budget's 95% interval (above zero: ahead, below: behind, across:
    not separated) and whether the order of the two methods flips ('' under two paired seeds: no interval)."""
    at_reference, at_longer = margins
    if len(at_reference) < 2:
        return ""
    verdicts = [verdict_of(m) for m in (at_reference, at_longer)]
    said, signs = [], []
    for v, r in zip(verdicts, rounds):
        assert v.mean is not None and v.interval is not None   # two or more seeds: a mean and its interval
        said.append(f"{v.mean:+.2f} [{v.interval[0]:+.2f}, {v.interval[1]:+.2f}] at round {r} ({STANDING[v.outcome]})")
        signs.append(v.mean > 0)
    decided = all(v.outcome != "inconclusive" for v in verdicts)
    same_sign = signs[0] == signs[1]
    order = (("the same order" if decided else "the mean margin keeps its sign") if same_sign else
             "the order of the two flips" if decided else "the mean margin changes sign, within the seed noise")
    return (f"{own}'s margin over {base}, paired over seeds {listed(map(str, at_reference))}: {said[0]}, "
            f"{said[1]}: {order}")


def still_moving(found: list[Settling]) -> bool:
    return any(s.moves for s in found)


def convergence_clause(found: list[Settling], margins: tuple[dict, dict] = ({}, {})) -> str:
    """The reference budget's convergence in a clause for a verdict note: settled, or which methods still move and by
    how much (the mean gap over their seeds), and how the paper's method's margin over its main baseline moves
    with them and whether the two keep their order at 3x the rounds (what a reader weighs a margin against): with
    intervals where ``margins`` (``budget_margins``) pairs two seeds or more, else from the means."""
    if not found:
        return "convergence not yet recorded"
    moving = [f"{s.method} {s.gap:+.2f}" for s in found if s.moves]
    if not moving:
        return "converged (each 3x run within 1 point or the seed spread)"
    own = found[0]   # the paper's method first, its main baseline second (the convergence grid's order)
    moved = (f"not converged: from the reference budget to 3x its rounds {', '.join(moving)} points "
             f"({own.averaged_over()}")
    if len(found) >= 2 and (paired := margins_text(margins, own.rounds, own.method, found[1].method)):
        return f"{moved}); {paired}; the verdicts compare methods at equal budgets"
    drift = ""
    if len(found) >= 2:
        base = found[1]
        before, after = own.reference - base.reference, own.longer - base.longer
        order = "the same order" if (before > 0) == (after > 0) else "the order of the two flips"
        drift = (f"; {own.method}'s margin over {base.method} moves by {after - before:+.2f}, from "
                 f"{before:+.2f} to {after:+.2f}: {order}")
    return (f"{moved}{drift}); "
            "the verdicts compare methods at equal budgets")


def margins_line(chapter: str, reference: dict, longer: dict, metric: str, found: list[Settling]) -> str:
    """The notebook's line on the paper's method's margin at both budgets, paired by seed (``margins_text``), or
    why it is not there yet."""
    if len(found) < 2:
        return "the margin at both budgets needs both methods' 3x runs"
    text = margins_text(budget_margins(reference, longer, metric), found[0].rounds, found[0].method, found[1].method)
    return (text + " (95% t-intervals)" if text else
            "the margin at both budgets, paired by seed, waits for the 3x runs of seeds 1 and 2 "
            f"(`python -m fedlib records {chapter} --scale reference --tables convergence`)")


def convergence_verdict(found: list[Settling]) -> list[str]:
    """One line per method: has the accuracy settled at the reference budget (the mean gap to 3x the rounds over its
    seeds within 1 point or the reference's spread over seeds)?"""
    out = []
    for s in found:
        out.append(f"{s.method}: {s.gap:+.2f} points from the reference budget to 3x its rounds "
                   f"({s.averaged_over()}): "
                   + ("settled (within 1 point or the seed spread)" if not s.moves else
                      f"still moving (beyond {s.bound:.2f} points): the reference scale does not give this method's "
                      "converged accuracy; its verdicts rest on margins at equal budgets"))
    return out


def raising_cost(chapter: str, tables: dict, factor: int = 3) -> dict | None:
    """What the remedy for an unconverged budget costs: the chapter's reference ``tables`` (``tables("reference")``;
    its convergence table aside) recorded at ``factor`` times their rounds, projected at its committed runs' rate
    per local step on the CPU (``recording.projected_hours``): {"runs", "hours" (process-hours), "devices"}; None before
    any record on a CPU."""
    from fedlib import results

    configs = recording_order({name: grid for name, grid in tables.items() if name != "convergence"})
    hits = results.lookup(chapter, configs, results.RESULTS)
    longer = [dataclasses.replace(c, rounds=c.rounds * factor) for c in configs]
    hours = projected_hours(configs, hits, longer, "cpu")
    if hours is None:
        return None
    devices = sorted({processor(h.record["device"]) for h in hits
                      if h is not None and str(h.record.get("device", "")).startswith("cpu")})
    return {"runs": len(configs), "hours": hours, "devices": devices, "factor": factor}


def processor(device: str) -> str:
    """The processor a record's CPU ``device`` names ("cpu (AMD EPYC with AVX-512, x86_64, ...)" -> "AMD EPYC"); "an
    unnamed x86_64 CPU" for the early records that name only the architecture."""
    first = device.removeprefix("cpu (").split(", ")[0].split(" with ")[0]
    return f"an unnamed {first} CPU" if first in ("x86_64", "aarch64") else first


def raising_text(cost: dict | None, cores: int = 2) -> str:
    """``raising_cost`` in a sentence for the convergence section ('' without records)."""
    if cost is None:
        return ""
    return (f"Raising the budget to {cost['factor']}x its rounds means recording the chapter's reference grid "
            f"({cost['runs']} runs) again at that budget: about {cost['hours']:.1f} process-hours at the committed "
            f"runs' rate per local step on {listed(cost['devices'])} (about {cost['hours'] / cores:.1f} hours on "
            f"{cores} cores). This book has not done that; its reference verdicts compare methods at equal budgets.")


def plot_convergence(longer: dict, R: int, metric: str, labels: dict, title: str, ylabel: str,
                     paper: dict | None = None, local_test: bool = False):
    """``metric`` per evaluated round of the 3x runs (solid) and, where given, of committed paper-scale records of
    the same configs (dotted), seed 0, with the reference budget R marked; chance and, where the metric reads the
    clients' local test sets (``local_test``), the majority floor."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    paper = paper or {}
    for i, label in enumerate(longer):
        for recs, style, what in ((paper.get(label, []), ":", "paper-scale record"), (longer[label], "-", "3x run")):
            rec = seed_zero(recs)
            if rec is None:
                continue
            pts = [(h["round"], 100 * h[metric]) for h in rec["history"] if metric in h]
            ax.plot(*zip(*pts), style, color=f"C{i}", marker="o" if style == "-" else None, ms=3,
                    label=f"{labels.get(label, label)}, {what}")
    ax.axvline(R, color="grey", lw=1)
    ax.annotate(f"reference: round {R}", (R, ax.get_ylim()[0]), xytext=(4, 4), textcoords="offset points",
                fontsize=8)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    chance_line(ax)
    if local_test:
        floor_line(ax, majority_floor([r for recs in (*paper.values(), *longer.values()) for r in recs]))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def show_convergence(chapter: str, grid: dict, metric: str, labels: dict, title: str, ylabel: str, test_set: str,
                     local_test: bool = False, tables: dict | None = None) -> list[Settling]:
    """A notebook's convergence section in one call: the table of ``settlings`` from the chapter's committed
    records (its provenance and floor), one line per method from ``convergence_verdict``, where a method still
    moves what raising the budget of its reference ``tables`` would cost (``raising_cost``), and the curves; or a
    line saying the runs are not recorded yet. Returns what it read (``Settling`` per method)."""
    from fedlib.studies.report import show_table

    reference, longer = convergence_runs(chapter, grid)
    found = settlings(reference, longer, metric, labels)
    if not found:
        print(f"the convergence runs are not recorded yet (`python -m fedlib records {chapter} --scale reference` "
              "records them first)")
        return found
    records = [r for recs in (*reference.values(), *longer.values()) for r in recs]
    show_table([s.row() for s in found], records, "reference", test_set, state_floor=True,
               note=f"{title}; {metric} at the last evaluation (%), {found[0].averaged_over()}; gap in points")
    print("\n".join(convergence_verdict(found)))
    print(margins_line(chapter, reference, longer, metric, found))
    if tables is not None and still_moving(found):
        print(raising_text(raising_cost(chapter, tables)))
    R = next(cfgs[0].rounds for cfgs in grid.values()) // 3
    plot_convergence(longer, R, metric, labels, f"{title}, seed 0", ylabel, local_test=local_test)
    return found
