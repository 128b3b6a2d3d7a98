"""The FedMate page's own tables and figures (notebooks/fedmate/fedmate.ipynb reads them as pages): the smoke runs of
Tables 1 and 2, the repeat sweep and the communication check, the class-wise recall and prototype plots. What the
chapter declares (its budgets, grids, claims, inventory and the recorded tables the overview reads) is fedmate; this
module only runs, reads and shows."""
from __future__ import annotations

from typing import Any

import numpy as np
from fedlib.studies.fedmate import (
    FIG_METHODS,
    FMNIST_CLASSES,
    LABELS,
    PAPER_T2,
    SCALES,
    TABLE2,
    communication_grid,
    config,
    repeat_grid,
    table1_grid,
    table1_rows,
    table2_grid,
)

from fedlib.plots import chance_line
from fedlib.studies.common import (
    ON_CPU,
    Runtime,
    fmt,
    mean_std,
    nested,
    run_grid,
)


def table1(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table 1 (the methods and the ablation rows): personalized models on a balanced test set, over the
    headline seeds. Returns (rows, {(dataset, s): {row: records}})."""
    table = nested(run_grid(table1_grid(scale), desc="Table 1", store=store, runtime=runtime))
    return table1_rows(table, scale), table


def table2(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Table 2: three classes per client, each client tested on its own label mix. Returns (rows,
    {dataset: {method: records}})."""
    sc = SCALES[scale]
    runs = run_grid(table2_grid(scale), desc="Table 2", store=store, runtime=runtime)
    table = nested(runs)
    rows = []
    for m in TABLE2:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in sc.table2_datasets:
            row[f"{ds.upper()}"] = fmt(mean_std(table[ds][m], "personal_local_acc"))
        row["paper CIFAR-10"], row["paper CINIC-10"] = PAPER_T2[m][0], PAPER_T2[m][1]
        rows.append(row)
    return rows, table


def classwise(scale: str, methods=FIG_METHODS, runtime: Runtime = ON_CPU) -> tuple[dict, dict]:
    """Figs. 3 and 4 (FMNIST, s = 20): per-class recall of the personalized models on the balanced test set,
    and every client's local prototypes. Returns ({method: recall per class}, {method: (prototypes, labels)})."""
    from fedlib.metrics import per_class_recall

    rounds = SCALES[scale].rounds
    recall, points = {}, {}
    for m in methods:
        federation = runtime.trained(config(m, "fmnist", scale, s=20))
        recall[m] = per_class_recall(sum(federation.final_confusions["personal_global"]))
        protos, labels = [], []
        for c in federation.clients:
            ctx = federation.context(federation.task(c, rounds))
            counts, p, _ = federation.method.local_statistics(ctx, federation.method.eval_params(ctx))
            protos.append(p[counts > 0].numpy())
            labels.append(np.flatnonzero(counts.numpy() > 0))
        points[m] = (np.concatenate(protos), np.concatenate(labels))
    return recall, points


def plot_recall(recall: dict, scale: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    x = np.arange(10)
    for i, (m, values) in enumerate(recall.items()):
        ax.bar(x + (i - 1.5) * 0.2, 100 * values, width=0.2, label=LABELS[m])
    ax.set_xticks(x, FMNIST_CLASSES, rotation=20, fontsize=8)
    ax.set_ylabel("accuracy (%)")
    chance_line(ax)
    ax.legend(ncol=4)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"per-class accuracy of the personalized models, FMNIST s = 20, scale {scale}")
    fig.tight_layout()
    return fig


def plot_prototypes(points: dict):
    """t-SNE (scikit-learn) of every client's local prototypes, coloured by class."""
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    fig, axes = plt.subplots(1, len(points), figsize=(3.75 * len(points), 3.6))
    for ax, (m, (P, y)) in zip(np.atleast_1d(axes), points.items()):
        emb = TSNE(n_components=2, random_state=0, init="pca", perplexity=min(30, len(P) - 1)).fit_transform(P)
        ax.scatter(emb[:, 0], emb[:, 1], c=y, cmap="tab10", s=12)
        ax.set_title(f"{LABELS[m]}: local prototypes")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return fig


def repeat_sweep(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[dict, dict]:
    """Fig. 5 (FMNIST, s = 50): clients with repeated samples. Returns ({method: {ratio: ms}}, runs)."""
    runs = run_grid(repeat_grid(scale), desc="Fig. 5", progress=False, store=store, runtime=runtime)
    return nested({cell: mean_std(recs, "personal_global_acc") for cell, recs in runs.items()}), runs


def plot_repeat(repeat: dict, scale: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for m, res in repeat.items():
        ax.plot([100 * r for r in res], [100 * v[0] for v in res.values()], marker="o", label=LABELS[m])
    ax.set_xlabel("repeat ratio (%)")
    ax.set_ylabel("accuracy, balanced test (%)")
    chance_line(ax)
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(f"FMNIST s = 50, scale {scale}")
    fig.tight_layout()
    return fig


def communication(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[list[dict], dict]:
    """Appx. 2: FedMate with CFT (x = 0.05) against FedMate sending the extractor every round (FMNIST, s = 10).
    Returns (rows, {"with"|"without": records})."""
    runs = run_grid(communication_grid(scale), desc="CFT", progress=False, store=store, runtime=runtime)
    rows = [
        {
            "variant": k,
            "uploaded / client / round": f"{np.mean([r['uploaded_per_client'] for r in v[0]['history']]):,.0f}",
            "accuracy": fmt(mean_std(v, "personal_global_acc")),
        }
        for k, v in runs.items()
    ]
    return rows, runs
