"""Has a reference budget converged? Every chapter with a reference scale records its paper's method and main
baseline at 3x the reference rounds (seeds 0-2; the ``convergence`` table of ``tables("reference")``, built by
``grid.convergence_grid`` from cells of its headline table). This module reads those runs beside the reference
runs of the same configs, paired by seed: says per method whether the endpoint moved beyond 1 point or the seed
spread (the mean over the seeds that have both runs), gives the paper's method's margin over its baseline at both
budgets, and draws the curves (seed 0) with the reference budget marked."""
from __future__ import annotations

import dataclasses

from fedlib.plots import chance_line, floor_line
from fedlib.studies.grid import projected_hours, recording_order, stored_grid
from fedlib.studies.report import convergence_gap, majority_floor, per_seed
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


def convergence_rows(reference: dict, longer: dict, metric: str, labels: dict) -> list[dict]:
    """Per label with a reference record and its 3x run at one seed or more: the metric (%) at the reference budget
    R and at 3R, the gap 3R - R (points), each a mean over the seeds that have both runs, the gap's 95% t-interval
    over those seeds ("-" at one seed) and the reference's std over seeds (points). ``labels``: {label: how the
    table names it}."""
    rows = []
    for label, recs in reference.items():
        gap = convergence_gap(recs, longer.get(label, []), metric)
        if gap is None:
            continue
        R, far = gap["rounds"]
        interval = verdict_of(gap["gaps"]).interval
        method = label[0] if isinstance(label, tuple) else label   # a cell key (method, setting, ...) names its method
        rows.append({"method": labels.get(label, labels.get(method, str(label))),
                     "seeds": listed(map(str, gap["seeds"])),
                     f"round {R} (reference)": round(gap["reference"], 2),
                     f"round {far} (3x)": round(gap["longer"], 2), f"gap {far} - {R}": round(gap["gap"], 2),
                     "95% interval of the gap": "-" if interval is None else
                     f"[{interval[0]:+.2f}, {interval[1]:+.2f}]",
                     "reference std over seeds": round(gap["spread"], 2)})
    return rows


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


def budget_rounds(row: dict) -> tuple[int, int]:
    """(R, 3R) of a ``convergence_rows`` row."""
    reference, longer = [int(k.split()[1]) for k in row if k.startswith("round ")][:2]
    return reference, longer


def row_gap(row: dict) -> float:
    return next(v for k, v in row.items() if k.startswith("gap "))


def row_ends(row: dict) -> tuple[float, float]:
    """(the metric at the reference budget, at 3x its rounds) of a ``convergence_rows`` row: means over its seeds."""
    reference, longer = (v for k, v in row.items() if k.startswith("round "))
    return reference, longer


def settle_bound(row: dict) -> float:
    """How far the endpoint may move and still count as settled: 1 point or the reference's seed spread (one seed:
    1 point)."""
    spread = row["reference std over seeds"]
    return max(1.0, spread if spread == spread else 0.0)


def moves(row: dict) -> bool:
    """Does a ``convergence_rows`` row's endpoint still move: its gap beyond 1 point or the seed spread?"""
    return abs(row_gap(row)) > settle_bound(row)


def still_moving(rows: list[dict]) -> bool:
    return any(moves(row) for row in rows)


def convergence_clause(rows: list[dict], margins: tuple[dict, dict] = ({}, {})) -> str:
    """The reference budget's convergence in a clause for a verdict note: settled, or which methods still move and by
    how much (the mean gap over the rows' seeds), and how the paper's method's margin over its main baseline moves
    with them and whether the two keep their order at 3x the rounds (what a reader weighs a margin against): with
    intervals where ``margins`` (``budget_margins``) pairs two seeds or more, else from the rows' means."""
    if not rows:
        return "convergence not yet recorded"
    moving = [f"{row['method']} {row_gap(row):+.2f}" for row in rows if moves(row)]
    if not moving:
        return "converged (each 3x run within 1 point or the seed spread)"
    rounds = budget_rounds(rows[0])
    moved = (f"not converged: from the reference budget to 3x its rounds {', '.join(moving)} points "
             f"({averaged_over(rows[0])}")
    if len(rows) >= 2 and (paired := margins_text(margins, rounds, rows[0]["method"], rows[1]["method"])):
        return f"{moved}); {paired}; the verdicts compare methods at equal budgets"
    drift = ""
    if len(rows) >= 2:   # the paper's method first, its main baseline second (the convergence grid's order)
        (own_r, own_3r), (base_r, base_3r) = row_ends(rows[0]), row_ends(rows[1])
        before, after = own_r - base_r, own_3r - base_3r
        order = "the same order" if (before > 0) == (after > 0) else "the order of the two flips"
        drift = (f"; {rows[0]['method']}'s margin over {rows[1]['method']} moves by {after - before:+.2f}, from "
                 f"{before:+.2f} to {after:+.2f}: {order}")
    return (f"{moved}{drift}); "
            "the verdicts compare methods at equal budgets")


def margins_line(chapter: str, reference: dict, longer: dict, metric: str, rows: list[dict]) -> str:
    """The notebook's line on the paper's method's margin at both budgets, paired by seed (``margins_text``), or
    why it is not there yet."""
    if len(rows) < 2:
        return "the margin at both budgets needs both methods' 3x runs"
    text = margins_text(budget_margins(reference, longer, metric), budget_rounds(rows[0]), rows[0]["method"],
                        rows[1]["method"])
    return (text + " (95% t-intervals)" if text else
            "the margin at both budgets, paired by seed, waits for the 3x runs of seeds 1 and 2 "
            f"(`python -m fedlib records {chapter} --scale reference --tables convergence`)")


def convergence_verdict(rows: list[dict]) -> list[str]:
    """One line per row of ``convergence_rows``: has the accuracy settled at the reference budget (the mean gap to 3x
    the rounds over the row's seeds within 1 point or the reference's spread over seeds)?"""
    out = []
    for row in rows:
        gap, bound = row_gap(row), settle_bound(row)
        out.append(f"{row['method']}: {gap:+.2f} points from the reference budget to 3x its rounds "
                   f"({averaged_over(row)}): "
                   + ("settled (within 1 point or the seed spread)" if not moves(row) else
                      f"still moving (beyond {bound:.2f} points): the reference scale does not give this method's "
                      "converged accuracy; its verdicts rest on margins at equal budgets"))
    return out


def raising_cost(chapter: str, tables: dict, factor: int = 3) -> dict | None:
    """What the remedy for an unconverged budget costs: the chapter's reference ``tables`` (``tables("reference")``;
    its convergence table aside) recorded at ``factor`` times their rounds, projected at its committed runs' rate
    per local step on the CPU (``grid.projected_hours``): {"runs", "hours" (process-hours), "devices"}; None before
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


def averaged_over(row: dict) -> str:
    """Which seeds a ``convergence_rows`` row's numbers are read at: "mean over seeds 0, 1 and 2", or "seed 0"."""
    return f"mean over seeds {row['seeds']}" if " and " in row["seeds"] else f"seed {row['seeds']}"


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
                     local_test: bool = False, tables: dict | None = None) -> list[dict]:
    """A notebook's convergence section in one call: the table of ``convergence_rows`` from the chapter's committed
    records (its provenance and floor), one line per method from ``convergence_verdict``, where a method still
    moves what raising the budget of its reference ``tables`` would cost (``raising_cost``), and the curves; or a
    line saying the runs are not recorded yet. Returns the rows."""
    from fedlib.studies.report import show_table

    reference, longer = convergence_runs(chapter, grid)
    rows = convergence_rows(reference, longer, metric, labels)
    if not rows:
        print(f"the convergence runs are not recorded yet (`python -m fedlib records {chapter} --scale reference` "
              "records them first)")
        return rows
    records = [r for recs in (*reference.values(), *longer.values()) for r in recs]
    show_table(rows, records, "reference", test_set, state_floor=True,
               note=f"{title}; {metric} at the last evaluation (%), {averaged_over(rows[0])}; gap in points")
    print("\n".join(convergence_verdict(rows)))
    print(margins_line(chapter, reference, longer, metric, rows))
    if tables is not None and still_moving(rows):
        print(raising_text(raising_cost(chapter, tables)))
    R = next(cfgs[0].rounds for cfgs in grid.values()) // 3
    plot_convergence(longer, R, metric, labels, f"{title}, seed 0", ylabel, local_test=local_test)
    return rows
