"""FedPAC (Xu et al., ICLR 2023): feature alignment to global prototypes + classifier collaboration.

Local: the head trains first with the body frozen (``head_epochs``), then the body with
CE + lambda * MSE(z, C_bar^(y)). Server: bodies averaged by sample size; client i's head is
sum_j a_ij head_j with a_i = argmin a^T (diag(v) + D_i) a on the simplex, where
D_i[j1, j2] = sum_k (h_ik - h_j1k).(h_ik - h_j2k), h_jk = p_j(k) * C_j^(k) and v_j the feature
variance of client j. A client whose matrix is not PSD keeps its own head."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from fedlib.aggregate import difference_grams, is_psd, mix, select, simplex_qp_batch
from fedlib.engine.core import Phase
from fedlib.engine.core import cross_entropy_loss as ce_loss
from fedlib.losses import cross_entropy, prototype_mse
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, PerClientAggregation, PrototypeSharing, hyper
from fedlib.methods.registry import register


@dataclass
class PacHyper(Hyper):
    lam: float = hyper(1.0, NON_NEGATIVE)
    head_epochs: int = hyper(1, POSITIVE)


def collaboration_matrices(protos: torch.Tensor, counts: torch.Tensor, variances: torch.Tensor) -> np.ndarray:
    """Q_i = diag(v) + D_i for every client i: (m, m, m)."""
    p = counts / counts.sum(1, keepdim=True)
    h = (p.unsqueeze(-1) * protos).flatten(1).double().cpu().numpy()  # (m, K*d)
    return np.diag(variances.double().cpu().numpy())[None] + difference_grams(h[:, None, :])


def collaboration_weights(protos: torch.Tensor, counts: torch.Tensor, variances: torch.Tensor,
                          solver=simplex_qp_batch) -> np.ndarray:
    """FedPAC's classifier-combination weights for every client (rows) over clients (columns)."""
    Q = collaboration_matrices(protos, counts, variances)
    m = len(Q)
    psd = np.array([is_psd(q) for q in Q])
    A = np.eye(m)
    if psd.any():
        A[psd] = solver(Q[psd])
    return A


@register
class FedPAC(PerClientAggregation, PrototypeSharing):
    name = "fedpac"
    label = "FedPAC"
    paper = "Xu, Tong & Huang, ICLR 2023"
    cite = "xu2023fedpac"
    Hyper = PacHyper
    shared = ("body", "projector")
    personalized = True
    has_global_model = False
    upload_variance = True
    upload_keys: ClassVar[tuple[str, ...]] = ("head",)

    def local_phases(self, ctx):
        return [Phase(trainable=("head",), epochs=self.hp.head_epochs, loss=ce_loss),
                Phase(trainable=("body", "projector"))]

    def local_loss(self, out, batch, params, ctx):
        reg = prototype_mse(out.z, batch, ctx.received["protos"], ctx.received["present"])
        return cross_entropy(out.logits, batch) + self.hp.lam * reg

    def upload(self, ctx, models, result):
        up = super().upload(ctx, models, result)
        up["head"] = select(models["local"], ("head",))
        return up

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ids, ups = list(uploads), list(uploads.values())
        A = collaboration_weights(torch.stack([u["protos"] for u in ups]), torch.stack([u["counts"] for u in ups]),
                                  torch.stack([u["variance"] for u in ups]))
        self.store_personal(server, ids, mix([u["head"] for u in ups], A))
        server.state["weights"] = {"participants": ids, "beta": A}
