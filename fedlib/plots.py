"""Tables and figures used by the CLI and the notebooks."""
from __future__ import annotations

import numpy as np

METRIC_LABELS = {
    "personal_local_acc": "personalized acc (local tests, mean over clients)",
    "personal_local_f1": "personalized macro-F1 (local tests)",
    "global_acc": "global model acc (balanced global test)",
    "personal_global_acc": "personalized acc (global test)",
    "personal_local_class0_share": "local test images predicted as class 0",
    "personal_local_zero_embedding_share": "local test images with an all-zero embedding",
}


def fmt(mean_std) -> str:
    if mean_std is None:
        return "-"
    mean, std, n = mean_std
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if n > 1 else f"{100 * mean:.2f}"


def results_table(rows: dict[str, tuple[dict, float]]) -> str:
    """Plain-text table: one row per method, accuracy columns in %, wall time in seconds."""
    metrics = [m for m in METRIC_LABELS if any(m in summary for summary, _ in rows.values())]
    header = ["method"] + [m.replace("_", " ") for m in metrics] + ["wall s"]
    body = [[name] + [fmt(summary.get(m)) for m in metrics] + [f"{wall:.0f}"] for name, (summary, wall) in rows.items()]
    widths = [max(len(str(r[i])) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [header] + body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    legend = "; ".join(f"{m.replace('_', ' ')} = {METRIC_LABELS[m]}" for m in metrics)
    return "\n".join(lines) + f"\n({legend}; accuracies in %)"


def partition_heatmap(counts: np.ndarray, ax=None, title: str = "", cmap: str = "Blues"):
    """Client x class sample counts as a heat map (like FedGPA Fig. 2)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(0.35 * counts.shape[1] + 2, 0.25 * counts.shape[0] + 1.5))
    im = ax.imshow(counts, aspect="auto", cmap=cmap)
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_xticks(range(counts.shape[1]))
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, label="samples")
    return ax


def weight_heatmap(weights: np.ndarray, ax=None, title: str = "", vmax: float | None = None):
    """Aggregation weights: row i = the weights client i gives to each client (column)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xlabel("from client j")
    ax.set_ylabel("client i")
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax)
    return ax


def learning_curves(records_by_label: dict[str, list[dict]], metric: str = "personal_local_acc", ax=None, title="",
                    floor: float | None = None, chance: bool = True):
    """Mean over seeds of ``metric`` per evaluated round, with a ±1 std band; chance (unless ``chance`` is False),
    and ``floor`` (the majority floor of a metric read on the clients' local test sets) where given."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for label, records in records_by_label.items():
        rounds = [row["round"] for row in records[0]["history"] if metric in row]
        if not rounds:
            continue
        values = np.array([[row[metric] for row in r["history"] if metric in row] for r in records]) * 100
        mean, std = values.mean(0), values.std(0)
        ax.plot(rounds, mean, marker="o", ms=3, label=label)
        ax.fill_between(rounds, mean - std, mean + std, alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric) + " (%)")
    if chance:
        chance_line(ax)
    floor_line(ax, floor)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return ax


def floor_line(ax, floor: float | None, axis: str = "y") -> None:
    """The majority-class floor (%) of a metric read on the clients' local test sets (a model that always predicts
    each client's most frequent class scores it; ``fedlib.studies.report.majority_floor``) as a dashed line."""
    if floor is not None:
        draw = ax.axhline if axis == "y" else ax.axvline
        draw(floor, color="0.4", ls="--", lw=1, label=f"majority floor ({floor:.0f}%)")


def chance_line(ax, classes: int = 10, axis: str = "y") -> None:
    """The accuracy of a uniform guess (100 / classes %) as a dotted line: a model near it did not train.
    Every dataset of the book's chapters has 10 classes."""
    draw = ax.axhline if axis == "y" else ax.axvline
    draw(100 / classes, color="0.5", ls=":", lw=1, label=f"chance ({100 / classes:.0f}%)")
