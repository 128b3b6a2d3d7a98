"""The pFedCSPC page's own tables and figures (notebooks/pfedcspc/pfedcspc.ipynb reads them as pages): the smoke runs
of Tables II-VII and Fig. 6 with their rows, the trade-off, learning-curve, prototype and PMI plots and readings.
What the chapter declares (its budgets, grids, claims, inventory and the recorded tables the overview reads) is
pfedcspc; this module only runs, reads and shows."""
from __future__ import annotations

from typing import Any

import numpy as np

# Table II: global-model methods (their "Local" is the global model fine-tuned on each client, the paper's
# FedAvg row has Local = FedAvg-FT's I_local) and the methods with personalised models
from fedlib.studies.pfedcspc import (
    GLOBAL_METHODS,
    LABELS,
    PAPER_T3,
    PAPER_T4,
    PAPER_T5,
    PAPER_T6,
    PAPER_T7,
    SCALES,
    TABLE2,
    TABLE3,
    TABLE4,
    TABLE5,
    TABLE6_BASES,
    TABLE7,
    ablations_grid,
    sweeps_grid,
    table2_grid,
    table2_rows,
    table3_grid,
    table6_grid,
    target_accuracy,
    with_seed_in,
)

from fedlib.plots import chance_line, floor_line
from fedlib.studies.common import (
    ON_CPU,
    Runtime,
    fmt,
    mean_std,
    nested,
    run_grid,
)
from fedlib.studies.report import majority_floor


def table2(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table II over the headline seeds: (rows, {dataset: {method: records}})."""
    table = nested(run_grid(table2_grid(scale), desc="Table II", store=store, runtime=runtime))
    return table2_rows(table, scale), table


def fedetf_note(table: dict, scale: str) -> str:
    """Why FedETF's Local stands apart (Table II), from the records: its evaluation adapts each client's model for
    far longer than the one epoch of fine-tuning the global-model methods get (the protocol table's words)."""
    from fedlib.methods import make_method

    ds = SCALES[scale].datasets[0]
    etf = table[ds]["fedetf"]
    adaptation = make_method("fedetf", **etf[0]["config"]["hyper"]).describes_adaptation()
    if not adaptation:
        return ""
    local = {m: 100 * mean_std(table[ds][m], "i_local")[0] for m in GLOBAL_METHODS + ["fedetf"]}
    glob = {m: 100 * mean_std(table[ds][m], "acc_global")[0] for m in GLOBAL_METHODS + ["fedetf"]}
    best = max(GLOBAL_METHODS, key=local.__getitem__)
    lead = local["fedetf"] - local[best]
    return (f"FedETF's Local ({local['fedetf']:.2f}) reads each client's model after {adaptation}; the global-model "
            f"methods' Local after one epoch of fine-tuning (the best of them, {LABELS[best]}, {local[best]:.2f}). "
            f"Its {'lead' if lead >= 0 else 'gap'} of {lead:+.2f} points is measured under the longer adaptation: "
            f"its global model alone scores {glob['fedetf']:.2f} against {LABELS[best]}'s {glob[best]:.2f}.")


def plot_tradeoff(table: dict, scale: str):
    """Table II as a plane: Global (x) against Local (y), one marker per method and a legend, so that
    methods with close numbers stay readable."""
    import matplotlib.pyplot as plt

    ds = SCALES[scale].datasets[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    markers = "os^vD<>phX*P"
    for i, m in enumerate(TABLE2):
        g, loc = (100 * mean_std(table[ds][m], k)[0] for k in ("acc_global", "i_local"))
        ax.scatter(
            g,
            loc,
            s=140 if m == "pfedcspc" else 45,
            marker="*" if m == "pfedcspc" else markers[i % len(markers)],
            color=f"C{i % 10}",
            edgecolor="k" if m == "pfedcspc" else "none",
            label=LABELS[m],
        )
    ax.set_xlabel("Global: ACC_global (%)")
    ax.set_ylabel("Local: I_local (%)")
    chance_line(ax)
    chance_line(ax, axis="x")
    floor_line(ax, majority_floor([r for m in TABLE2 for r in table[ds][m]]))   # I_local reads local tests
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"{ds.upper()}, scale {scale}: up and to the right is better")
    fig.tight_layout()
    return fig


def table3(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None, runtime: Runtime = ON_CPU
           ) -> tuple[list[dict], dict, list]:
    """Table III: I_local of the personalized-FL baselines; FedAvg, FedAvg-FT and pFedCSPC come from Table II's
    runs (their seeds among the main seeds). Returns (rows, {dataset: {method: records}} of the personalized methods
    (FedAvg-FT and pFedCSPC from Table II, on the main seeds; I_local reads each one's own model), every record
    used). ``runs``: the records of ``table3_grid`` at hand (committed ones); None runs the grid."""
    sc = SCALES[scale]
    seeds = sc.main_seeds
    runs = run_grid(table3_grid(scale), desc="Table III", store=store, runtime=runtime) if runs is None else runs
    table: dict[str, dict] = {ds: {} for ds in sc.datasets}
    table.update(nested(runs))
    rows, used = [], list(runs.values())
    for m in TABLE3:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in sc.datasets:
            if m in ("fedavg", "fedavg_ft", "pfedcspc"):
                recs = with_seed_in(table2_[ds]["fedavg" if m == "fedavg_ft" else m], seeds)
                value = mean_std(recs, "global_local_i_local" if m == "fedavg" else "i_local")
                used.append(recs)
            else:
                value = mean_std(table[ds][m], "i_local")
            row[f"{ds.upper()} I_local"] = fmt(value)
        row["paper C10"] = PAPER_T3[m]
        rows.append(row)
    for ds in sc.datasets:   # the personalized methods Table II ran, on Table III's seeds (the verdict's table)
        table[ds]["fedavg_ft"] = with_seed_in(table2_[ds]["fedavg"], seeds)
        table[ds]["pfedcspc"] = with_seed_in(table2_[ds]["pfedcspc"], seeds)
    return rows, table, used


def ablations(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None,
              runtime: Runtime = ON_CPU) -> dict:
    """Tables IV and V: {run name: records} for every ablation run (FedAvg and the full method from Table II).
    ``runs``: the records of ``ablations_grid`` at hand (committed ones); None runs the grid."""
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.seeds
    if runs is None:
        runs = run_grid(ablations_grid(scale), desc="Tables IV-V", store=store, runtime=runtime)
    runs = dict(runs)
    runs["fedavg"] = with_seed_in(table2_[ds]["fedavg"], seeds)
    runs["full"] = with_seed_in(table2_[ds]["pfedcspc"], seeds)
    return runs


def ablation_tables(runs: dict, scale: str) -> tuple:
    """(Table IV {row: ms}, Table V {row: ms}, Table IV rows, Table V rows)."""
    ds = SCALES[scale].datasets[0].upper()
    table4 = {row: mean_std(runs[run], metric) for row, (run, metric) in TABLE4.items()}
    table5 = {row: mean_std(runs[run], metric) for row, (run, metric) in TABLE5.items()}
    rows4 = [{"row": r, f"{ds} ACC_global": fmt(v), "paper C10 (C=1.0)": PAPER_T4[r]} for r, v in table4.items()]
    rows5 = [{"row": r, f"{ds} I_local": fmt(v), "paper C10": PAPER_T5[r]} for r, v in table5.items()]
    return table4, table5, rows4, rows5


def table6(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None,
           runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table VI: pFedCSPC on other local objectives, each beside the objective alone. Returns (rows,
    {base: (records alone, records with pFedCSPC)}). ``runs``: the records of ``table6_grid`` at hand (committed
    ones); None runs what Table II has not."""
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.main_seeds
    alone = {b: with_seed_in(table2_[ds][b], seeds) for b in TABLE6_BASES if b in table2_[ds]}
    todo = {k: v for k, v in table6_grid(scale).items() if k not in alone}
    done = run_grid(todo, desc="Table VI", store=store, runtime=runtime) if runs is None else runs
    table = {b: (alone.get(b) or done[b], done[f"+{b}"]) for b in TABLE6_BASES}
    rows = [{"method": LABELS[b], f"{ds.upper()} alone": fmt(mean_std(a, "acc_global")),
             f"{ds.upper()} +pFedCSPC": fmt(mean_std(w, "acc_global")),
             "paper C10 alone": PAPER_T6[b][0], "paper C10 +pFedCSPC": PAPER_T6[b][1]} for b, (a, w) in table.items()]
    return rows, table


def table7(table2_: dict, table6_: dict, scale: str) -> tuple:
    """Table VII: the first evaluated round at which the global model (mean over the main seeds) reaches
    FedAvg's final accuracy. Returns (rows, {method: round or None}, curves {method: (rounds, mean acc)},
    target, {method: records used})."""
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.main_seeds
    used = {m: with_seed_in(table2_[ds].get(m) or table6_[m][0], seeds) for m in TABLE7}
    curves = {}
    for m, recs in used.items():
        evaluated = [[row for row in r["history"] if "acc_global" in row] for r in recs]
        curves[m] = (
            [row["round"] for row in evaluated[0]],
            np.mean([[row["acc_global"] for row in h] for h in evaluated], 0),
        )
    target = target_accuracy(with_seed_in(table2_[ds]["fedavg"], seeds))
    reached = {m: next((t for t, a in zip(*curves[m]) if a >= target), None) for m in TABLE7}
    rows = [{"method": LABELS[m], f"{ds.upper()} rounds to {100 * target:.1f}%":
             reached[m] if reached[m] is not None else f"> {sc.rounds}",
             "paper C10 (66%, beta 0.5)": PAPER_T7[m][1]} for m in TABLE7]
    return rows, reached, curves, target, used


def plot_curves(curves: dict, target: float, scale: str):
    import matplotlib.pyplot as plt

    ds = SCALES[scale].datasets[0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for m, (rounds, acc) in curves.items():
        ax.plot(
            rounds,
            100 * acc,
            marker="o" if m == "pfedcspc" else None,
            lw=2.5 if m == "pfedcspc" else 1,
            label=LABELS[m],
        )
    ax.axhline(100 * target, color="k", ls=":", lw=1)
    ax.set_xlabel("round")
    ax.set_ylabel("ACC_global (%)")
    chance_line(ax)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax.set_title(f"{ds.upper()}, scale {scale}")
    fig.tight_layout()
    return fig


def prototype_sweeps(ablation_runs: dict, scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """Fig. 6 (n_repeat x n_aug) and the number of clusters j: {(n_repeat, n_aug) | ("clusters", j): records};
    the defaults (5, 5) and j = 2 are the full method's runs."""
    sweep = run_grid(sweeps_grid(scale), desc="Fig. 6", store=store, runtime=runtime)
    sweep[(5, 5)] = ablation_runs["full"]
    sweep[("clusters", 2)] = ablation_runs["full"]
    return sweep


def plot_fig6(sweep: dict, scale: str):
    import matplotlib.pyplot as plt

    grid = sorted(k for k in sweep if k[0] != "clusters")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, metric, name in zip(axes, ("acc_global", "i_local"), ("Global", "Local")):
        for r in sorted({r for r, _ in grid}):
            augs = [a for rr, a in grid if rr == r]
            ax.plot(augs, [100 * mean_std(sweep[(r, a)], metric)[0] for a in augs], marker="o", label=f"n_repeat = {r}")
        ax.set_xlabel("n_aug")
        ax.set_ylabel(f"{name} (%)")
        chance_line(ax)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"{SCALES[scale].datasets[0].upper()}, scale {scale}")
    fig.tight_layout()
    return fig


def clusters_rows(sweep: dict) -> tuple[list[dict], dict]:
    clusters = {k[1]: recs for k, recs in sweep.items() if k[0] == "clusters"}
    rows = [{"clusters j": j, "Global": fmt(mean_std(r, "acc_global")), "Local": fmt(mean_std(r, "i_local"))}
            for j, r in sorted(clusters.items())]
    return rows, clusters


def pmi_reading(correlation: float) -> str:
    """What the printed correlation of PMI weights with label-mix similarity says, in words generated from it."""
    if correlation >= 0.5:
        how = "follow label-mix similarity: a client leans on the clients whose label mix resembles its own"
    elif correlation >= 0.2:
        how = "follow label-mix similarity weakly"
    elif correlation > -0.2:
        how = "do not follow label-mix similarity here: PMI does not pick the clients with similar label mixes"
    else:
        how = "run against label-mix similarity"
    return (f"correlation of PMI weights and label-mix similarity over client pairs: {correlation:.2f}: the weights "
            f"{how}")


def plot_pmi(record: dict):
    """PMI's Eq. 4 weights of the last round of one run beside the cosine similarity of the clients' label
    mixes; returns (figure, their correlation over client pairs)."""
    import matplotlib.pyplot as plt

    W = np.asarray(record["final"]["weights"]["pmi"])
    counts = np.asarray(record["train_counts"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    im = axes[0].imshow(W, cmap="viridis")
    axes[0].set_xlabel("uploaded encoder k'")
    axes[0].set_ylabel("client k")
    axes[0].set_title("PMI weights p_k^k' (last round)")
    fig.colorbar(im, ax=axes[0])
    mix = counts / counts.sum(1, keepdims=True)
    sim = mix @ mix.T / np.outer(np.linalg.norm(mix, axis=1), np.linalg.norm(mix, axis=1))
    im = axes[1].imshow(sim, cmap="viridis")
    axes[1].set_title("cosine similarity of label mixes")
    fig.colorbar(im, ax=axes[1])
    fig.tight_layout()
    off = ~np.eye(len(W), dtype=bool)
    return fig, float(np.corrcoef(W[off], sim[off])[0, 1])
