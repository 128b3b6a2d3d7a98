"""Server-side rules on parameter dictionaries: averages, per-client mixes, simplex QPs."""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import numpy as np
import torch

Params = Mapping[str, torch.Tensor]


def select(params: Params, parts: Iterable[str]) -> dict[str, torch.Tensor]:
    """The entries of ``params`` whose name starts with one of ``parts`` (body/projector/head)."""
    parts = tuple(parts)
    return {k: v for k, v in params.items() if k.split(".", 1)[0] in parts}


def weighted_average(dicts: list[Params], weights) -> dict[str, torch.Tensor]:
    """sum_j w_j * dict_j / sum_j w_j, key by key (integer buffers are averaged then rounded)."""
    return mix(dicts, [weights])[0]


def mix(dicts: list[Params], weight_matrix) -> list[dict[str, torch.Tensor]]:
    """Personalized aggregation: row i of ``weight_matrix`` (normalised to sum 1) mixes ``dicts`` into client i's
    copy, key by key in float64 as one matrix product over the stacked dicts (a few operations per key, not one
    per client and source: on a GPU the server's step is launch-bound). Each copy owns its tensors."""
    W = torch.as_tensor(np.asarray(weight_matrix, dtype=np.float64))
    W = W / W.sum(1, keepdim=True)
    out: list[dict[str, torch.Tensor]] = [{} for _ in range(len(W))]
    for key, first in dicts[0].items():
        stacked = torch.stack([d[key] for d in dicts]).reshape(len(dicts), -1).double()
        mixed = (W.to(stacked.device) @ stacked).reshape(len(W), *first.shape)
        mixed = (mixed if first.is_floating_point() else mixed.round()).to(first.dtype)
        for copy, row in zip(out, mixed.unbind(0)):
            copy[key] = row.clone()
    return out


@functools.lru_cache(maxsize=16)
def _simplex_problem(m: int):
    """min ||F a||^2 s.t. a >= 0, sum a = 1 with F a cvxpy Parameter: a DPP problem compiled once
    per size and reused for every client and round (~4x faster than building it each time)."""
    import cvxpy as cp

    F = cp.Parameter((m, m))
    a = cp.Variable(m)
    return cp.Problem(cp.Minimize(cp.sum_squares(F @ a)), [a >= 0, cp.sum(a) == 1]), F, a


def simplex_qp(Q: np.ndarray, zero_below: float = 1e-3) -> np.ndarray:
    """argmin_a a^T Q a  s.t. a >= 0, sum a = 1 for a PSD Q, solved with cvxpy (Clarabel) through
    a factor Q = F^T F; weights below ``zero_below`` are set to zero and the rest renormalised
    (as FedPAC does)."""
    import cvxpy as cp

    Q = 0.5 * (np.asarray(Q, dtype=np.float64) + np.asarray(Q, dtype=np.float64).T)
    evals, evecs = np.linalg.eigh(Q)
    scale = max(float(np.abs(evals).max()), 1e-300)
    problem, F, a = _simplex_problem(Q.shape[0])
    F.value = (np.sqrt(np.clip(evals / scale, 0, None))[:, None] * evecs.T)  # scaling keeps the solver well posed
    problem.solve(solver=cp.CLARABEL)
    if a.value is None:
        raise RuntimeError(f"simplex QP failed: {problem.status}")
    w = np.clip(np.asarray(a.value).reshape(-1), 0, None)
    w[w < zero_below] = 0.0
    return w / w.sum()


def difference_grams(C: np.ndarray, p: np.ndarray | None = None) -> np.ndarray:
    """G[i, a, b] = sum_k p_ik (C_ik - C_ak) . (C_ik - C_bk) for C (m, K, d), p (m, K) (default 1):
    the Gram matrices of every client's differences to all others (FedPAC's D_i, FedGPA's G_i),
    computed from per-class inner products without materialising the (m, m, K, d) differences."""
    C = np.asarray(C, dtype=np.float64)
    m, K, _ = C.shape
    p = np.ones((m, K)) if p is None else np.asarray(p, dtype=np.float64)
    D = np.einsum("akd,bkd->kab", C, C)                       # (K, m, m) inner products per class
    own = np.einsum("kii->ki", D)                              # C_ik . C_ik
    cross = np.einsum("ik,kib->ib", p, D)                      # sum_k p_ik C_ik . C_bk
    return (np.einsum("ik,ki->i", p, own)[:, None, None] - cross[:, None, :] - cross[:, :, None]
            + np.einsum("ik,kab->iab", p, D))


def _project_simplex(V: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of every row of V onto the probability simplex (sort-based)."""
    n = V.shape[-1]
    U = torch.sort(V, dim=-1, descending=True).values
    css = U.cumsum(-1) - 1
    k = torch.arange(1, n + 1, dtype=V.dtype, device=V.device)
    rho = ((U - css / k) > 0).sum(-1, keepdim=True)
    theta = css.gather(-1, rho - 1) / rho.to(V.dtype)
    return (V - theta).clamp_min(0)


def _active_set(q: np.ndarray, x: np.ndarray, tol: float = 1e-12, max_iter: int | None = None) -> np.ndarray:
    """Exact minimiser of x^T q x on the simplex from a feasible start: the primal active-set method
    (Nocedal & Wright, Algorithm 16.3) with the bounds x_j >= 0 as the inequality constraints."""
    n = len(x)
    x = np.clip(x, 0, None)
    x /= x.sum()
    working = x <= 1e-12
    x[working] = 0.0
    x /= x.sum()
    for _ in range(max_iter or 3 * n + 10):
        free = np.flatnonzero(~working)
        g = 2 * q @ x
        kkt = np.zeros((len(free) + 1, len(free) + 1))
        kkt[:-1, :-1], kkt[:-1, -1], kkt[-1, :-1] = 2 * q[np.ix_(free, free)], 1.0, 1.0
        rhs = np.concatenate([-g[free], [0.0]])
        step = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:-1]            # minimum-norm step on the free set
        f = x @ q @ x
        decrease = -(g[free] @ step) - step @ q[np.ix_(free, free)] @ step  # f(x) - f(x + step)
        if np.abs(step).max(initial=0.0) <= 1e-12 or decrease <= 1e-13 * max(f, 1e-300):
            nu = -g[free].mean() if len(free) else 0.0
            mu = g + nu                                                 # multipliers of the bounds x_j >= 0
            mu[~working] = np.inf
            j = int(np.argmin(mu))
            if mu[j] >= -tol * max(1.0, np.abs(g).max()):
                return x                                                # KKT conditions hold
            working[j] = False
            continue
        p = np.zeros(n)
        p[free] = step
        blocking = np.flatnonzero((p < 0) & ~working)
        ratios = -x[blocking] / p[blocking]
        alpha = min(1.0, ratios.min()) if len(blocking) else 1.0
        x = x + alpha * p
        if alpha < 1.0:
            j = blocking[int(np.argmin(ratios))]
            working[j], x[j] = True, 0.0
        x = np.clip(x, 0, None)
        x /= x.sum()
    return x


def simplex_qp_batch(Q, zero_below: float = 1e-3, iters: int = 300, tol: float = 1e-10) -> np.ndarray:
    """argmin_a a^T Q_i a  s.t. a >= 0, sum a = 1 for a batch of PSD matrices Q (b, n, n), all at once:
    accelerated projected gradient (FISTA with restarts, batched in float64 on each Q_i scaled to
    unit largest eigenvalue) finds the support, and an active-set method finishes each problem
    exactly. Weights below ``zero_below`` are zeroed and the rest renormalised, as in ``simplex_qp``
    (cvxpy), the tested reference."""
    Q = torch.as_tensor(np.asarray(Q, dtype=np.float64))
    Q = 0.5 * (Q + Q.transpose(1, 2))
    b, n, _ = Q.shape
    scale = torch.linalg.eigvalsh(Q).abs().amax(-1).clamp_min(1e-300)
    Qs = Q / scale[:, None, None]
    step = 0.5                                         # 1 / L with L = 2 * lambda_max = 2
    a = torch.full((b, n), 1.0 / n, dtype=Q.dtype)
    y, t = a.clone(), torch.ones(b, 1, dtype=Q.dtype)
    objective = lambda x: torch.einsum("bi,bij,bj->b", x, Qs, x)  # noqa: E731
    f = checkpoint = objective(a)
    for it in range(iters):
        a_new = _project_simplex(y - step * 2 * torch.einsum("bij,bj->bi", Qs, y))
        f_new = objective(a_new)
        t_new = (1 + torch.sqrt(1 + 4 * t * t)) / 2
        restart = (f_new > f)[:, None]                 # momentum restarts when the objective rises
        y = torch.where(restart, a_new, a_new + ((t - 1) / t_new) * (a_new - a))
        t = torch.where(restart, torch.ones_like(t), t_new)
        a, f = a_new, f_new
        if it % 50 == 49:
            if torch.all((checkpoint - f).abs() <= tol * f.abs().clamp_min(1e-30)):
                break
            checkpoint = f
    out = np.stack([_active_set(q, x) for q, x in zip(Qs.numpy(), a.numpy())])
    out[out < zero_below] = 0.0
    return out / out.sum(1, keepdims=True)


def is_psd(Q: np.ndarray, tol: float = 1e-8) -> bool:
    return bool(np.linalg.eigvalsh(0.5 * (Q + Q.T)).min() >= -tol * max(1.0, np.abs(Q).max()))
