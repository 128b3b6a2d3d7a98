"""FedPAC (Xu et al., ICLR 2023): feature alignment to global prototypes + classifier collaboration.

Local: the head trains first with the body frozen (``head_epochs``), then the body with
CE + lambda * MSE(z, C_bar^(y)). Server: bodies averaged by sample size; client i's head is
sum_j a_ij head_j with a_i = argmin a^T (diag(v) + D_i) a on the simplex, where
D_i[j1, j2] = sum_k (h_ik - h_j1k).(h_ik - h_j2k), h_jk = p_j(k) * C_j^(k) and v_j the feature
variance of client j. A client whose matrix is not PSD keeps its own head.

Readings of the authors' code (github.com/JianXu95/FedPAC) that differ from fedlib's defaults, as switches:
``statistics="received"`` computes the combination's statistics (counts, h_jk, v_j) on the model a client
receives, before its local training (fedlib: on the trained model; the global prototypes come from the trained
model either way); ``head_lr`` gives the head step a rate of its own (the code: 0.1, whatever the experiment's).
The code's other differences are the experiment's, not the method's: SGD with momentum 0.5 and weight decay 5e-4
at lr 0.01 for every method, and its FMNIST CNN (``model="cnn_pac"``)."""
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from fedlib.aggregate import difference_grams, is_psd, mix, select, simplex_qp_batch
from fedlib.engine.core import Phase
from fedlib.engine.core import cross_entropy_loss as ce_loss
from fedlib.losses import cross_entropy, prototype_mse
from fedlib.methods.base import (
    NON_NEGATIVE,
    POSITIVE,
    Hyper,
    PerClientAggregation,
    PrototypeSharing,
    added_later,
    hyper,
)
from fedlib.methods.registry import register
from fedlib.prototypes import feature_variance

STATISTICS = ("trained", "received")   # the model the combination's statistics are computed on


@dataclass
class PacHyper(Hyper):
    lam: float = hyper(1.0, NON_NEGATIVE)
    head_epochs: int = hyper(1, POSITIVE)
    statistics: str = added_later("trained", STATISTICS)
    head_lr: float | None = added_later(None, POSITIVE)   # None: the experiment's rate


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


@register("fedpac", "FedPAC", "Xu, Tong & Huang, ICLR 2023", cite="xu2023fedpac")
class FedPAC(PerClientAggregation, PrototypeSharing):
    Hyper = PacHyper
    shared = ("body", "projector")
    personalized = True
    has_global_model = False
    upload_variance = True
    upload_keys: ClassVar[tuple[str, ...]] = ("head", "received_protos", "received_counts", "received_variance")

    def receive(self, ctx):
        models = super().receive(ctx)
        if self.hp.statistics == "received":   # the authors' code: before local training
            ctx.scratch["received"] = self.local_statistics(ctx, models["local"])
        return models

    def local_phases(self, ctx):
        return [Phase(trainable=("head",), epochs=self.hp.head_epochs, loss=ce_loss, lr=self.hp.head_lr),
                Phase(trainable=("body", "projector"))]

    def local_loss(self, out, batch, params, ctx):
        reg = prototype_mse(out.z, batch, ctx.received["protos"], ctx.received["present"])
        return cross_entropy(out.logits, batch) + self.hp.lam * reg

    def upload(self, ctx, models, result):
        up = super().upload(ctx, models, result)
        up["head"] = select(models["local"], ("head",))
        if self.hp.statistics == "received":
            counts, protos, sq = ctx.scratch["received"]
            up.update(received_protos=protos, received_counts=counts.long(),
                      received_variance=feature_variance(counts, sq, protos))
        return up

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ids, ups = list(uploads), list(uploads.values())
        prefix = "received_" if self.hp.statistics == "received" else ""
        A = collaboration_weights(*(torch.stack([u[prefix + key] for u in ups])
                                    for key in ("protos", "counts", "variance")))
        self.store_personal(server, ids, mix([u["head"] for u in ups], A))
        server.state["weights"] = {"participants": ids, "beta": A}


@dataclass(frozen=True)
class CodeReading:
    """One way the authors' code runs FedPAC differently from fedlib's default: what it changes of the method's
    hyperparameters and of the experiment's fields."""
    says: str
    hyper: tuple[tuple[str, object], ...] = ()
    fields: tuple[tuple[str, object], ...] = ()

    def applied(self, cfg):
        """``cfg`` (an experiment Config) run this way."""
        return dataclasses.replace(cfg, hyper={**cfg.hyper, **dict(self.hyper)}, **dict(self.fields))


# the authors' code (github.com/JianXu95/FedPAC: methods/fedpac.py, running.py, models/cnn.py, options.py)
CODE_READINGS = {
    "statistics before training": CodeReading(
        "the classifier combination's statistics (class counts, prototypes, feature variance) computed on the received "
        "model, before local training (`statistics=\"received\"`; fedlib: on the trained model)",
        hyper=(("statistics", "received"),)),
    "head rate 0.1": CodeReading("the head's step at a fixed rate of 0.1 (`head_lr`; fedlib: the experiment's rate)",
                                 hyper=(("head_lr", 0.1),)),
    "momentum, weight decay, lr 0.01": CodeReading(
        "SGD with momentum 0.5 and weight decay 5e-4 at lr 0.01, for every method of the code "
        "(fedlib: the experiment's optimizer)", fields=(("momentum", 0.5), ("weight_decay", 5e-4), ("lr", 0.01))),
    "the code's CNN": CodeReading("its FMNIST CNN (`model=\"cnn_pac\"`: conv2 padding 1, leaky ReLU, 117,066 "
                                  "parameters; fedlib's `cnn2`: 80,202)", fields=(("model", "cnn_pac"),)),
}
ALL_OF_THE_CODE = CodeReading("all four", hyper=tuple(kv for r in CODE_READINGS.values() for kv in r.hyper),
                              fields=tuple(kv for r in CODE_READINGS.values() for kv in r.fields))
