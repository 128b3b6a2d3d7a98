"""The FedGPA page's own tables and figures (notebooks/fedgpa/fedgpa.ipynb reads them as pages): the smoke runs' rows,
the recorded tables at paper scale, the learning curves, weight heat maps and sweeps, the convergence and precision
checks. What the chapter declares (its budgets, grids, claims and inventory) is fedgpa; this module only reads runs
and records and shows them."""
from __future__ import annotations

import numpy as np
from fedlib.studies.fedgpa import (
    ABLATION,
    CLAIMS,
    CONVERGENCE,
    FEDLIB_PAC,
    LABELS,
    METHODS,
    METRIC,
    MU_SWEEP,
    SCALES,
    SETTINGS,
    ablation_grid,
    comparison_grid,
    config,
    fedpac_readings_grid,
    logged_weights,
    mu_sweep_grid,
    paper_accuracy,
    tables,
)

from fedlib.claims import cut
from fedlib.plots import chance_line, floor_line
from fedlib.studies.common import (
    ON_CPU,
    Runtime,
    fmt,
    mean_std,
    run_grid,
    with_seeds,
)
from fedlib.studies.report import majority_floor

# Paper-scale cells more than 2 points from the paper, and what we know of why (shown under the table).
GAP_NOTES = {
    "fedbabu": "FedBABU fine-tunes the whole model for 5 epochs at the training lr (0.02) before evaluation, as its "
               "own paper and code do (version 2; version 1's single epoch gave 81.43 at Setting 1, s=20); FedGPA's "
               "paper does not state how it fine-tuned FedBABU",
}


def gap_note(method: str, records: list[dict]) -> str:
    """Why a paper-scale cell is off by more than 2 points, with the records' own numbers: for a method that
    fine-tunes, its global model and its fine-tuned models on the same local tests (mean over the records)."""
    note = GAP_NOTES.get(method, "not explained yet")
    own = [r["final"].get("global_local_acc") for r in records]
    if method in GAP_NOTES and all(v is not None for v in own):
        global_model, tuned = 100 * np.mean(own), 100 * np.mean([r["final"][METRIC] for r in records])
        note += (f" (on the same local tests: global model {global_model:.2f}, fine-tuned {tuned:.2f}; fine-tuning "
                 f"{'lowers' if tuned < global_model else 'raises'} it by {abs(tuned - global_model):.2f})")
    return note


def comparison(settings, s_values, methods, scale: str, store: str | None = None,
               runtime: Runtime = ON_CPU) -> dict:
    """Tables 2, 4 and 5: {(method, setting, s): records over the scale's seeds}, one worker pool."""
    return run_grid(comparison_grid(settings, s_values, methods, scale), desc="comparison", store=store,
                    runtime=runtime)


def comparison_rows(runs: dict, scale: str) -> list[dict]:
    """One row per (setting, s, method): ours (mean ± std over seeds) beside the paper."""
    return [{"setting": st, "s": s, "method": LABELS[m], f"ours ({scale})": fmt(mean_std(recs)),
             "paper": paper_accuracy(st, m, s)} for (m, st, s), recs in runs.items()]


def setting_table(rows: list[dict], runs: dict, setting: int, methods, scale: str):
    """One setting of the comparison, methods down, s across: (table, its records)."""
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r["setting"] == setting])
    table = df.pivot(index="method", columns="s", values=[f"ours ({scale})", "paper"])
    return table.reindex([LABELS[m] for m in methods]), [recs for k, recs in runs.items() if k[1] == setting]


def outlier_notes(runs: dict, methods) -> list[str]:
    """Sentences for results a reader would stop at, generated from the runs: FedProx equal to FedAvg (its proximal
    pull per SGD step is lr * mu of the distance to the global model)."""
    from fedlib.methods import make_method

    notes = []
    cells = [(st, s) for (m, st, s) in runs if m == "fedprox" and ("fedavg", st, s) in runs]
    if "fedprox" in methods and "fedavg" in methods and cells:
        gaps = [abs(mean_std(runs[("fedprox", st, s)])[0] - mean_std(runs[("fedavg", st, s)])[0]) * 100
                for st, s in cells]
        cfg = runs[("fedprox", *cells[0])][0]["config"]
        mu, lr = make_method("fedprox", **(cfg.get("hyper") or {})).hp.mu, float(cfg["lr"])
        if max(gaps) < 0.5:
            notes.append(f"FedProx is within {max(gaps):.2f} points of FedAvg in every cell: its proximal term "
                         f"(mu/2)||w - w_global||^2 with mu = {mu:g} moves each SGD step by lr * mu = {lr * mu:.2g} of "
                         "the distance to the global model, too little to change a client's training at this budget")
    return notes


def plot_against_paper(runs: dict, settings, s_values, methods, scale: str):
    """Each method's accuracy at this scale (y) against the paper's (x), one panel per setting."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings), 4), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, st in zip(axes, settings):
        for s, marker in zip(s_values, "os"):
            ours = [100 * mean_std(runs[(m, st, s)])[0] for m in methods]
            paper = [paper_accuracy(st, m, s) for m in methods]
            ax.scatter(paper, ours, marker=marker, label=f"s = {s}")
            for m, x, y in zip(methods, paper, ours):
                ax.annotate(LABELS[m], (x, y), fontsize=6, alpha=0.7)
        ax.set_title(f"Setting {st}")
        ax.set_xlabel("paper (%)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"ours at scale {scale} (%)")
    floor = majority_floor([r for recs in runs.values() for r in recs])
    for ax in axes:
        chance_line(ax)
        floor_line(ax, floor)
    axes[0].legend()
    fig.suptitle("Each method: our accuracy against the paper's")
    fig.tight_layout()
    return fig


def plot_learning_curves(runs: dict, setting: int, s_values, methods, scale: str):
    """Mean over seeds of the personalized accuracy per evaluated round (cf. Fig. 7 of the appendix)."""
    import matplotlib.pyplot as plt

    from fedlib.plots import learning_curves

    fig, axes = plt.subplots(1, len(s_values), figsize=(6 * len(s_values), 4), sharey=True)
    for ax, s in zip(np.atleast_1d(axes), s_values):
        learning_curves({LABELS[m]: runs[(m, setting, s)] for m in methods}, ax=ax,
                        title=f"Setting {setting}, s = {s}, scale {scale}",
                        floor=majority_floor([r for m in methods for r in runs[(m, setting, s)]]))
    fig.tight_layout()
    return fig


def ablation(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """Table 3 (Setting 1, s = 20): {row: records}, modules switched on one by one."""
    return run_grid(ablation_grid(scale), desc="Table 3", store=store, runtime=runtime)


def ablation_rows(runs: dict, scale: str) -> list[dict]:
    return [{"modules": name, **ABLATION[name][0], f"ours ({scale})": fmt(mean_std(recs)),
             "paper (FMNIST)": ABLATION[name][1]} for name, recs in runs.items()]


def recorded_ablation(scale: str) -> tuple[list[dict], list[dict]]:
    """Table 3 from the committed records at ``scale`` (reference or paper): (rows beside the paper's, the records
    they read), both empty until every row has a record; a row's mean is over the seeds it has."""
    from fedlib.studies.common import stored_grid

    runs = {name: cell["records"] for name, cell in stored_grid("fedgpa", ablation_grid(scale)).items()}
    if not all(runs.values()):
        return [], []
    return ablation_rows(runs, scale), [r for records in runs.values() for r in records]


def mu_sweep(s_values, scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[dict, dict]:
    """Fig. 3 (Setting 3): ({s: {mu: (mean, std, n)}}, {(s, mu): records})."""
    runs = run_grid(mu_sweep_grid(s_values, scale), desc="mu sweep", progress=False, store=store, runtime=runtime)
    return {s: {mu: mean_std(runs[(s, mu)]) for mu in MU_SWEEP} for s in s_values}, runs


def fedpac_readings(scale: str = "reference") -> tuple[list[dict], list[dict], str]:
    """Each reading's FedPAC beside fedlib's, from the committed records (``readings.reading_rows``): its accuracy,
    its difference from fedlib's FedPAC and FedGPA's margin over it, paired by seed."""
    from fedlib.studies.common import stored_grid
    from fedlib.studies.readings import reading_rows

    runs = {cell: c["records"] for cell, c in stored_grid("fedgpa", fedpac_readings_grid(scale)).items()}
    gpa = {s: c["records"] for (_, _, s), c in stored_grid("fedgpa", comparison_grid((1,), (20, 80), ["fedgpa"],
                                                                                       scale)).items()}
    return reading_rows(runs, {s: runs[(FEDLIB_PAC, s)] for s in gpa}, gpa, METRIC,
                        ("s", "FedPAC", "fedlib's FedPAC", "FedGPA"))


def s_sweep(methods, scale: str, s_grid=(0, 20, 50, 80), runtime: Runtime = ON_CPU) -> tuple[dict, dict]:
    """Accuracy against the skew s, Setting 1 (cf. Fig. 5): ({method: {s: (mean, std, n)}}, runs)."""
    seeds = SCALES[scale].sweep_seeds
    runs = run_grid({(m, s): with_seeds(config(m, 1, s, scale), seeds) for m in methods for s in s_grid},
                    desc="s sweep", progress=False, runtime=runtime)
    return {m: {s: mean_std(runs[(m, s)]) for s in s_grid} for m in methods}, runs


def plot_sweep(curves: dict, xlabel: str, title: str, labels: dict | None = None, floors: dict | None = None):
    """{curve label: {x: (mean, std, n)}} as lines with ±1 std error bars (accuracy in %), with the majority floor
    of the clients' local test sets: ``floors`` {curve label: floor} (one partition per curve: a dashed line each)
    or {x: floor} (the partition changes along x: a dashed curve)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key, points in curves.items():
        xs = list(points)
        ax.errorbar(xs, [100 * points[x][0] for x in xs], yerr=[100 * points[x][1] for x in xs], marker="o", capsize=3,
                    label=(labels or {}).get(key, key))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("personalized accuracy (%)")
    chance_line(ax)
    floors = {k: v for k, v in (floors or {}).items() if v is not None}
    if floors and set(floors) <= set(curves):
        for key, floor in floors.items():
            ax.axhline(floor, color="0.4", ls="--", lw=1, label=f"majority floor, {(labels or {}).get(key, key)} "
                                                               f"({floor:.0f}%)")
    elif floors:
        ax.plot(list(floors), list(floors.values()), color="0.4", ls="--", lw=1, label="majority floor")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


def plot_weights(runs: dict, s_values) -> tuple:
    """Fig. 4: FedGPA's alpha (extractor) and beta (classifier) weights, Setting 3, first and last logged
    round, one row per s; returns (figure, one summary line per s)."""
    import matplotlib.pyplot as plt

    from fedlib.plots import weight_heatmap

    fig, axes = plt.subplots(len(s_values), 4, figsize=(16, 3.6 * len(s_values)))
    axes = np.atleast_2d(axes)
    lines = []
    for r, s in enumerate(s_values):
        if ("fedgpa", 3, s) not in runs:
            continue
        logged = logged_weights(runs[("fedgpa", 3, s)][0])
        for c, (row, which) in enumerate([(logged[0], "alpha"), (logged[-1], "alpha"), (logged[0], "beta"),
                                          (logged[-1], "beta")]):
            weight_heatmap(np.array(row["weights"][which]), ax=axes[r, c],
                           title=f"{'FE' if which == 'alpha' else 'CLS'} ({which}), s={s}, round {row['round']}")
        a, b = np.array(logged[-1]["weights"]["alpha"]), np.array(logged[-1]["weights"]["beta"])
        lines.append(
            f"s = {s}, last round: mean self-weight alpha {np.diag(a).mean():.3f}, beta {np.diag(b).mean():.3f}; "
            f"mean row entropy alpha {(-(a * np.log(a + 1e-12)).sum(1)).mean():.2f}, "
            f"beta {(-(b * np.log(b + 1e-12)).sum(1)).mean():.2f} nats"
        )
    fig.tight_layout()
    return fig, lines


def reference_note() -> str:
    """What the reference scale is, as a share of the paper's training."""
    ref, paper = SCALES["reference"], SCALES["paper"]
    share = ref.rounds * ref.local_epochs / (paper.rounds * paper.local_epochs)
    return (f"the paper's protocol (20 clients, full n, E = {ref.local_epochs}, batch 50, SGD lr 0.02) stopped "
            f"at round {ref.rounds} of {paper.rounds}: {100 * share:.1f}% of the paper's training steps, "
            f"seeds {ref.seeds}. No method of this chapter depends on the number of rounds, so each reference run "
            f"is the first {ref.rounds} rounds of the paper-scale run of its seed")


def value_at(record: dict, rnd: int, metric: str = METRIC) -> float | None:
    """A record's ``metric`` (%) at evaluated round ``rnd``, None where it was not evaluated then."""
    row = next((h for h in record["history"] if h["round"] == rnd and metric in h), None)
    return None if row is None else 100 * row[metric]


def settlings(reference: dict, longer: dict, paper: dict) -> list:
    """The convergence check (``studies.convergence.Settling``), per method of CONVERGENCE (Setting 1, s = 20): its
    accuracy at the reference budget R and at 3R, means over the seeds with both runs, with the paper's 150 rounds
    beside them (the committed paper-scale records' mean over the same seeds, where each of them has one).
    ``reference``/``longer``/``paper``: {method: records}."""
    import dataclasses

    from fedlib.studies.convergence import settlings as settlings_of

    found = settlings_of({m: reference.get(m, []) for m in CONVERGENCE}, longer, METRIC, LABELS)
    by_label = {LABELS[m]: m for m in CONVERGENCE}
    out = []
    for s in found:
        at_150 = {int(r["seed"]): value_at(r, 150) for r in paper.get(by_label[s.method], [])
                  if int(r["seed"]) in s.seeds}
        full = None if set(at_150) != set(s.seeds) or None in at_150.values() else float(np.mean(list(at_150.values())))
        out.append(dataclasses.replace(s, paper=full, paper_round=150))
    return out


def plot_convergence(longer: dict, paper: dict, R: int):
    """Accuracy per evaluated round of the 3x runs and of the paper-scale records (seed 0, Setting 1, s = 20),
    with the reference budget marked."""
    from fedlib.studies.convergence import plot_convergence as plot

    return plot({m: longer.get(m, []) for m in CONVERGENCE}, R, METRIC, LABELS, "FMNIST Setting 1, s = 20, seed 0",
                "personalized accuracy (%)", paper=paper, local_test=True)


def margin_stability(rounds=(10, 20, 30, 50, 100, 150)) -> list[dict]:
    """Each claim that the comparison decides, on the committed paper-scale records cut at round R: the deciding
    comparison at the paper's budget (the last R), its mean difference at each R over the seeds it pairs, and the
    claim's outcome at the first and the last R. Whether a shorter budget gives the verdict the paper's budget gives,
    on the same runs (a reference-scale run is the first rounds of the paper-scale run of its seed)."""
    chapter = registry_chapter()
    evidence = chapter.evidence("paper")
    at = {R: chapter.assess("paper", {t: {cell: [cut(r, R) for r in recs] for cell, recs in cells.items()}
                                      for t, cells in evidence.items()}) for R in rounds}
    out = []
    for i, claim in enumerate(CLAIMS):
        if claim.tables != ("comparison",) or not at[rounds[-1]][i].decision.compared:
            continue
        final = at[rounds[-1]][i].decision.deciding
        row: dict = {"claim": claim.summary, "deciding comparison (round " + str(rounds[-1]) + ")": final.label}
        for R in rounds:
            same = next((c for c in at[R][i].decision.compared if c.label == final.label), None)
            row[f"round {R}"] = round(same.mean, 2) if same is not None else None
        for R in (rounds[0], rounds[-1]):
            row[f"outcome at round {R}"] = at[R][i].outcome + ("" if at[R][i].complete else " (partial)")
        out.append(row)
    return out


def budget_changes(rows: list[dict]) -> str:
    """In words, which claims ``margin_stability`` gives another outcome at its first round than at its last (the
    reference budget against the paper's, on the same runs)."""
    ends = [int(k.rsplit(" ", 1)[1]) for k in (rows[0] if rows else {}) if k.startswith("outcome at round ")]
    if len(ends) < 2:
        return ""
    first, last = min(ends), max(ends)
    changed = [row for row in rows if row[f"outcome at round {first}"] != row[f"outcome at round {last}"]]
    if not changed:
        return f"Every claim has the same outcome at round {first} as at round {last} of the same runs."
    return (f"{len(changed)} of {len(rows)} claims have another outcome at round {first} than at round {last} of "
            "the same runs: " + "; ".join(f"{row['claim']} ({row[f'outcome at round {first}']} -> "
                                          f"{row[f'outcome at round {last}']})" for row in changed)
            + f". Where a round-{first} outcome differs, the reference budget has not settled that claim.")


def registry_chapter():
    from fedlib.studies.registry import study

    return study("fedgpa")


def precision_check(scale: str = "reference", precision: str = "bf16") -> tuple[list[dict], list[dict], str,
                                                                             list[dict]]:
    """Table 2 (Setting 1) recorded in fp32 and in ``precision``, over the seeds recorded in ``precision``: (rows per
    cell, their records, a summary sentence, the claims both decide side by side; empty until every cell has records
    in both)."""
    from fedlib.studies.precision import (
        cell_differences,
        conclusion_rows,
        difference_rows,
        difference_summary,
        recorded_pair,
    )

    pair = recorded_pair("fedgpa", tables(scale)["headline"], precision)
    cells = cell_differences(pair, METRIC)
    label = lambda cell: {"method": LABELS[cell[0]], "s": cell[2]}  # noqa: E731
    rows = difference_rows(cells, METRIC, label, precision)
    records = [r for c in cells for r in (*c.base, *c.other)]
    base, other = pair.complete()   # every seed of every cell
    conclusions = []
    if base is not None and other is not None:
        chapter = registry_chapter()
        conclusions = conclusion_rows(chapter.assess(scale, {"comparison": base}),
                                      chapter.assess(scale, {"comparison": other}), precision)
    return rows, records, difference_summary(cells, METRIC, label, precision), conclusions


def recorded_rows(stored: dict, scale: str = "paper") -> list[dict]:
    """Ours at a recorded scale (committed records) beside the paper, one row per (setting, s, method); the
    difference to the paper only at paper scale (a shorter budget is not the paper's experiment)."""
    rows = []
    for (m, st, s), cell in stored.items():
        paper = paper_accuracy(st, m, s)
        ms = mean_std(cell["records"]) if cell["records"] else None
        row = {"setting": st, "s": s, "method": LABELS[m], f"ours ({scale} scale)": fmt(ms) if ms else "-",
               "seeds": len(cell["records"]), "paper": paper}
        if scale == "paper":
            row["ours - paper"] = round(100 * ms[0] - paper, 2) if ms else "-"
        rows.append({**row, "stale / missing": f"{cell['stale']} / {cell['missing']}"})
    return rows


def recorded_table(rows: list[dict], stored: dict, setting: int):
    """One setting of a recorded comparison, (method) down and s across: (table, its records)."""
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r["setting"] == setting]).drop(columns="setting")
    return (df.set_index(["method", "s"]).unstack("s"),
            [c["records"] for k, c in stored.items() if k[1] == setting])


def paper_scale_gaps(stored: dict, within: float = 2.0) -> list[str]:
    """How many recorded cells are within ``within`` points of the paper, and why each other one is not: a cell
    is flagged only where its difference exceeds both ``within`` and its own spread over seeds."""
    gaps, done = [], 0
    for (m, st, s), cell in stored.items():
        if not cell["records"]:
            continue
        done += 1
        mean, std, n = mean_std(cell["records"])
        diff = 100 * mean - paper_accuracy(st, m, s)
        if abs(diff) > max(within, 100 * std):
            spread = f"std {100 * std:.2f} over {n} seeds" if n > 1 else "1 seed"
            gaps.append(f"  Setting {st}, s={s}, {LABELS[m]}: {diff:+.2f} ({spread}): {gap_note(m, cell['records'])}")
    return [f"{done - len(gaps)} of {done} recorded cells within {within:g} points of the paper or of their seed "
            "spread; the others:"] + gaps


def plot_paper_scale(stored: dict):
    """Committed paper-scale records: ours (y) against the paper (x), with a band of 2 points."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    for (st, s), marker in zip([(st, s) for st in SETTINGS for s in (20, 80)], "os^vD<"):
        pts = [(paper_accuracy(st, m, s), 100 * mean_std(stored[(m, st, s)]["records"])[0])
               for m in METHODS if stored[(m, st, s)]["records"]]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=f"Setting {st}, s={s}")
    lims = [75, 92]
    ax.plot(lims, lims, "k-", lw=0.8)
    ax.fill_between(
        lims, [v - 2 for v in lims], [v + 2 for v in lims], color="grey", alpha=0.15, label="within 2 points"
    )
    ax.set_xlim(lims[0], lims[1]), ax.set_ylim(lims[0], lims[1])
    ax.set_xlabel("paper (%)")
    ax.set_ylabel("ours, paper scale (%)")
    chance_line(ax)
    ax.set_title("FMNIST, committed paper-scale records")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig
