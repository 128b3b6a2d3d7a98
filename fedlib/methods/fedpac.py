"""FedPAC (Xu et al., ICLR 2023): feature alignment to global prototypes + classifier collaboration.

Local: the head trains first with the body frozen (``head_epochs``), then the body with
CE + lambda * MSE(z, C_bar^(y)). Server: bodies averaged by sample size; client i's head is
sum_j a_ij head_j with a_i = argmin a^T (diag(v) + D_i) a on the simplex, where
D_i[j1, j2] = sum_k (h_ik - h_j1k).(h_ik - h_j2k), h_jk = p_j(k) * C_j^(k) and v_j the feature
variance of client j. A client whose matrix is not PSD keeps its own head."""
from dataclasses import dataclass

import numpy as np
import torch

from fedlib.aggregate import is_psd, mix, select, simplex_qp
from fedlib.engine.core import Phase
from fedlib.losses import prototype_mse
from fedlib.methods.base import Hyper, PrototypeSharing, cross_entropy, positive

import torch.nn.functional as F


@dataclass
class PacHyper(Hyper):
    lam: float = 1.0
    head_epochs: int = 1

    def validate(self):
        positive(self.lam, "lam", allow_zero=True)
        positive(self.head_epochs, "head_epochs")


def collaboration_weights(protos: torch.Tensor, counts: torch.Tensor, variances: torch.Tensor) -> np.ndarray:
    """FedPAC's classifier-combination weights for every client (rows) over clients (columns)."""
    p = counts / counts.sum(1, keepdim=True)
    h = (p.unsqueeze(-1) * protos).flatten(1).double().cpu().numpy()  # (m, K*d)
    v = variances.double().cpu().numpy()
    m = len(h)
    A = np.zeros((m, m))
    for i in range(m):
        diff = h[i] - h                                              # (m, K*d): h_i - h_j
        Q = np.diag(v) + diff @ diff.T
        A[i] = simplex_qp(Q) if is_psd(Q) else np.eye(m)[i]
    return A


class FedPAC(PrototypeSharing):
    name = "fedpac"
    paper = "Xu, Tong & Huang, ICLR 2023"
    Hyper = PacHyper
    shared = ("body", "projector")
    personalized = True
    has_global_model = False
    upload_variance = True

    def init_server(self, server, init, clients):
        super().init_server(server, init, clients)
        server.state["heads"] = {}

    def broadcast(self, server, client):
        msg = super().broadcast(server, client)
        msg["params"] = {**msg["params"], **server.state["heads"].get(client.id, {})}
        return msg

    def local_phases(self, ctx):
        return [Phase(trainable=("head",), epochs=self.hp.head_epochs, loss=cross_entropy),
                Phase(trainable=("body", "projector"))]

    def local_loss(self, out, batch, params, ctx):
        reg = prototype_mse(out.z, batch.y, ctx.received["protos"], ctx.received["present"])
        return F.cross_entropy(out.logits, batch.y) + self.hp.lam * reg

    def upload(self, ctx, params, client, executor):
        up = super().upload(ctx, params, client, executor)
        up["head"] = select(params, ("head",))
        return up

    def aggregate(self, server, uploads, clients):
        super().aggregate(server, uploads, clients)
        ids, ups = list(uploads), list(uploads.values())
        A = collaboration_weights(torch.stack([u["protos"] for u in ups]), torch.stack([u["counts"] for u in ups]),
                                  torch.stack([u["variance"] for u in ups]))
        for i, head in zip(ids, mix([u["head"] for u in ups], A)):
            server.state["heads"][i] = head
        server.state["weights"] = {"participants": ids, "beta": A}
