"""The FedPRP page's own tables and figures (notebooks/fedprp/fedprp.ipynb reads them as pages): the smoke runs of the
comparison, Table VII and the ablation, the class-group and A_glo plots, the beta sweep and its reading, the t-SNE
features, the cost table. What the chapter declares (its budgets, grids, claims, inventory and the recorded tables
the overview reads) is fedprp; this module only runs, reads and shows."""
from __future__ import annotations

import numpy as np
from fedlib.studies.fedprp import (
    KINDS,
    LABELS,
    METHODS,
    PAPER_T7,
    PAPER_T8,
    SCALES,
    _fmt_last,
    ablation_grid,
    beta_grid,
    comparison_grid,
    config,
    last,
    late_clients_grid,
    time_per_round,
)

from fedlib.plots import chance_line
from fedlib.studies.common import (
    ON_CPU,
    Runtime,
    fmt,
    run_grid,
)
from fedlib.studies.report import Measured


def comparison(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """Tables I, II, III and V: every method on both datasets under sharding (the headline seeds) and
    Dirichlet skew (the dataset's seeds), first long-tail gamma: {(dataset, kind, method): records}."""
    return run_grid(comparison_grid(scale), desc="Tables I, II, III, V", store=store, runtime=runtime)


def plot_groups(rows: list[dict]):
    """Table III as bars: the global model's accuracy per class group, per method and partition."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
    for ax, kind in zip(axes, KINDS):
        sub = [r for r in rows if r["partition"] == kind]
        x = np.arange(len(sub))
        for i, g in enumerate(("Many", "Medium", "Few")):
            ax.bar(x + (i - 1) * 0.27, [r[g].mean if isinstance(r[g], Measured) else np.nan for r in sub],
                   width=0.27, label=g)
        ax.set_xticks(x, [r["method"] for r in sub], rotation=30, fontsize=8)
        ax.set_title(f"{kind}: global model per class group")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("accuracy (%)")
    for ax in axes:
        chance_line(ax)
    axes[0].legend()
    fig.tight_layout()
    return fig


def plot_a_glo(runs: dict, scale: str):
    """A_glo over the rounds (cf. Fig. 5), both partitions, first dataset."""
    import matplotlib.pyplot as plt

    from fedlib.plots import learning_curves

    ds = SCALES[scale].datasets[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, kind in zip(axes, KINDS):
        learning_curves({LABELS[m]: runs[(ds, kind, m)] for m in METHODS}, metric="a_glo", ax=ax,
                        title=f"{ds.upper()}-LT {kind}, scale {scale}")
    fig.tight_layout()
    return fig


def late_clients(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict, dict]:
    """Table VII: clients that join in the last round. Returns (rows, {method: (A_loc, A_glo) in %}, runs)."""
    runs = run_grid(late_clients_grid(scale), desc="Table VII", progress=False, store=store, runtime=runtime)
    stats = {m: (last(recs, "a_loc", scale), last(recs, "a_glo", scale)) for m, recs in runs.items()}
    new = {m: (100 * loc[0], 100 * glo[0]) for m, (loc, glo) in stats.items()}
    rows = [{"method": LABELS[m], "new clients A_loc": fmt(loc), "A_glo": fmt(glo),
             "paper A_loc / A_glo (CIFAR-10 s=5, gamma=0.5)": f"{PAPER_T7[m][0]:.2f} / {PAPER_T7[m][1]:.2f}"}
            for m, (loc, glo) in stats.items()]
    return rows, new, runs


def ablation(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table VIII: FedPRP with L_ID and/or L_IC switched off. Returns (rows, {row: records})."""
    runs = run_grid(ablation_grid(scale), desc="Table VIII", progress=False, store=store, runtime=runtime)
    rows = [{"variant": row, "L_ID": "yes" if v[0] else "no", "L_IC": "yes" if v[1] else "no",
             "A_loc": _fmt_last(runs[row], "a_loc", scale), "A_glo": _fmt_last(runs[row], "a_glo", scale),
             "paper A_loc / A_glo": f"{v[2]:.2f} / {f'{v[3]:.2f}' if v[3] is not None else '-'}"}
            for row, v in PAPER_T8.items()]
    return rows, runs


def beta_sweep(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """Fig. 7: the weight beta of the old global prototypes (Eq. 8): {beta: records}."""
    return run_grid(beta_grid(scale), desc="Fig. 7", progress=False, store=store, runtime=runtime)


def plot_beta(beta_runs: dict, scale: str):
    import matplotlib.pyplot as plt

    ds = SCALES[scale].datasets[0]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    x = np.arange(4)
    for i, (beta, recs) in enumerate(beta_runs.items()):
        vals = [100 * last(recs, k, scale)[0] for k in ("a_glo", "global_many", "global_medium", "global_few")]
        ax.bar(x + (i - 1) * 0.27, vals, width=0.27, label=f"beta = {beta}")
    ax.set_xticks(x, ["All", "Many", "Medium", "Few"])
    ax.set_ylabel("A_glo (%)")
    chance_line(ax)
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"FedPRP, {ds.upper()}-LT shards, scale {scale}")
    fig.tight_layout()
    return fig


def beta_reading(beta_runs: dict, scale: str) -> list[str]:
    """What the beta sweep's A_glo says, read with Eq. 8: after R rounds a class's global prototype still holds
    beta^(R-1) of its first-round value (a class held every round), computed by a body one round old; the lines give
    that weight beside each A_glo, and say whether the budget can test Fig. 7 (the paper: R = 100)."""
    rows = []
    for beta, recs in sorted(beta_runs.items()):
        rounds = int(recs[0]["config"]["rounds"])
        rows.append((beta, 100 * last(recs, "a_glo", scale)[0], beta ** (rounds - 1), rounds))
    lines = [f"beta = {beta}: A_glo {acc:.2f}%; weight of the first round's prototypes after {rounds} rounds "
             f"beta^{rounds - 1} = {weight:.2g}" for beta, acc, weight, rounds in rows]
    falls = all(b[1] > a[1] for a, b in zip(rows[1:], rows))   # A_glo falls as beta grows
    stale = {beta: weight for beta, _, weight, _ in rows if weight >= 0.25}
    if falls and stale:
        lines.append("A_glo falls as beta grows, and at this budget the slow averages still hold "
                     + ", ".join(f"{100 * w:.0f}% (beta = {b})" for b, w in stale.items())
                     + " of the prototypes of the first round's body: the global prototypes lag the body they "
                       "classify. The paper's 100 rounds leave 0.9^99 = 3e-05 of them, so this budget does "
                       "not test Fig. 7's beta = 0.9 above beta = 0.1.")
    elif falls:
        lines.append("A_glo falls as beta grows although the first round's prototypes weigh less than 25% at every "
                     "beta: the lag of Eq. 8 does not explain it at this budget.")
    return lines


def plot_features(scale: str, methods=("fedavg", "fedprp"), clients: int = 5, runtime: Runtime = ON_CPU):
    """t-SNE (scikit-learn) of the features of the first clients' training images after a run (cf. Fig. 4)."""
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    sc = SCALES[scale]
    fig, axes = plt.subplots(1, len(methods), figsize=(5.5 * len(methods), 4.2))
    for ax, m in zip(np.atleast_1d(axes), methods):
        federation = runtime.trained(config(m, sc.datasets[0], "shards", sc.gammas[0], scale))
        feats, labels = [], []
        for c in federation.clients[:clients]:
            ctx = federation.context(federation.task(c, sc.rounds))
            out = ctx.features(federation.method.eval_params(ctx))
            feats.append(out.z.numpy())
            labels.append(ctx.labels.numpy())
        emb = TSNE(n_components=2, random_state=0, init="pca", perplexity=20).fit_transform(np.concatenate(feats))
        ax.scatter(emb[:, 0], emb[:, 1], c=np.concatenate(labels), cmap="tab10", s=6)
        ax.set_title(f"{LABELS[m]}: {clients} clients' features, coloured by class")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return fig


def cost_rows(runs: dict, scale: str) -> list[dict]:
    """Cf. Table VI: seconds per round and numbers uploaded per client per round (Dirichlet, first dataset)."""
    ds = SCALES[scale].datasets[0]
    return [
        {
            "method": LABELS[m],
            "s / round (ours)": round(time_per_round(runs[(ds, "dirichlet", m)]), 2),
            "uploaded numbers / client / round":
                f"{int(runs[(ds, 'dirichlet', m)][0]['final']['uploaded_per_client']):,}",
        }
        for m in METHODS
    ]
