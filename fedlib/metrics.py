"""Every metric derives from per-class confusion counts C[true, pred]."""
from __future__ import annotations

import numpy as np
import torch


def confusion(y_true: torch.Tensor, y_pred: torch.Tensor, num_classes: int) -> np.ndarray:
    idx = y_true.long() * num_classes + y_pred.long()
    return torch.bincount(idx, minlength=num_classes * num_classes).reshape(num_classes, num_classes).cpu().numpy()


def accuracy(C: np.ndarray) -> float:
    return float(np.trace(C) / max(C.sum(), 1))


def per_class_recall(C: np.ndarray) -> np.ndarray:
    support = C.sum(1)
    return np.where(support > 0, np.diag(C) / np.maximum(support, 1), np.nan)


def macro_f1(C: np.ndarray) -> float:
    """Macro F1 over the labels present in y_true or y_pred (scikit-learn's default label set)."""
    tp = np.diag(C).astype(float)
    support, predicted = C.sum(1), C.sum(0)
    labels = (support + predicted) > 0
    denom = support + predicted
    f1 = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)
    return float(f1[labels].mean()) if labels.any() else 0.0


def frequency_groups(class_counts: np.ndarray) -> dict[str, np.ndarray]:
    """FedPRP's Many / Medium / Few: top 20%, 20-50%, bottom 50% of classes by training count."""
    order = np.argsort(-np.asarray(class_counts), kind="stable")
    K = len(order)
    a, b = int(round(0.2 * K)), int(round(0.5 * K))
    return {"many": np.sort(order[:a]), "medium": np.sort(order[a:b]), "few": np.sort(order[b:])}


def group_accuracy(C: np.ndarray, classes: np.ndarray) -> float:
    """Accuracy on the samples whose true class is in ``classes`` (FedPRP Many/Medium/Few)."""
    sub = C[classes]
    return float(sub[:, classes].trace() / max(sub.sum(), 1)) if len(classes) else float("nan")


def harmonic(a: float, b: float) -> float:
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def i_local(C: np.ndarray) -> float:
    """pFedCSPC Eq. 20: harmonic mean of accuracy and macro-F1."""
    return harmonic(accuracy(C), macro_f1(C))


def summarize(per_client: list[np.ndarray]) -> dict[str, float]:
    """Mean over clients of accuracy / macro-F1 / I_local, and pooled accuracy."""
    accs = [accuracy(C) for C in per_client]
    return {"acc": float(np.mean(accs)), "acc_std_clients": float(np.std(accs)),
            "f1": float(np.mean([macro_f1(C) for C in per_client])),
            "i_local": float(np.mean([i_local(C) for C in per_client])),
            "acc_pooled": accuracy(np.sum(per_client, axis=0))}
