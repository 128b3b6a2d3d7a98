"""Server-side rules on parameter dictionaries: averages, per-client mixes, simplex QPs."""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
import torch

Params = Mapping[str, torch.Tensor]


def select(params: Params, parts: Iterable[str]) -> dict[str, torch.Tensor]:
    """The entries of ``params`` whose name starts with one of ``parts`` (body/projector/head)."""
    parts = tuple(parts)
    return {k: v for k, v in params.items() if k.split(".", 1)[0] in parts}


def weighted_average(dicts: list[Params], weights) -> dict[str, torch.Tensor]:
    """sum_j w_j * dict_j / sum_j w_j, key by key (integer buffers are averaged then rounded)."""
    w = torch.as_tensor(np.asarray(weights, dtype=np.float64))
    w = (w / w.sum()).tolist()
    out = {}
    for key in dicts[0]:
        acc = sum(wj * d[key].double() for wj, d in zip(w, dicts))
        out[key] = acc.to(dicts[0][key].dtype) if dicts[0][key].is_floating_point() else acc.round().to(dicts[0][key].dtype)
    return out


def mix(dicts: list[Params], weight_matrix) -> list[dict[str, torch.Tensor]]:
    """Personalized aggregation: row i of ``weight_matrix`` mixes ``dicts`` into client i's copy."""
    W = np.asarray(weight_matrix, dtype=np.float64)
    return [weighted_average(dicts, row) for row in W]


def simplex_qp(Q: np.ndarray, zero_below: float = 1e-3) -> np.ndarray:
    """argmin_a a^T Q a  s.t. a >= 0, sum a = 1, solved with cvxpy; weights below ``zero_below``
    are set to zero and the rest renormalised (as FedPAC does)."""
    import cvxpy as cp

    Q = 0.5 * (np.asarray(Q, dtype=np.float64) + np.asarray(Q, dtype=np.float64).T)
    m = Q.shape[0]
    a = cp.Variable(m)
    problem = cp.Problem(cp.Minimize(cp.quad_form(a, cp.psd_wrap(Q))), [a >= 0, cp.sum(a) == 1])
    problem.solve(solver=cp.CLARABEL)
    if a.value is None:
        raise RuntimeError(f"simplex QP failed: {problem.status}")
    w = np.clip(np.asarray(a.value).reshape(-1), 0, None)
    w[w < zero_below] = 0.0
    return w / w.sum()


def is_psd(Q: np.ndarray, tol: float = 1e-8) -> bool:
    return bool(np.linalg.eigvalsh(0.5 * (Q + Q.T)).min() >= -tol * max(1.0, np.abs(Q).max()))
