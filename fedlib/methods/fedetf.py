"""FedETF (Li, Shang, He, Lin & Wu, ICCV 2023): a fixed simplex-ETF classifier for federated learning.

The classifier is a synthetic simplex equiangular tight frame, fixed for the whole training (its Eq. 2):
  M = sqrt(K / (K - 1)) P (I_K - 1 1^T / K),  P in R^{d x K} with orthonormal columns,
shared by every client. The projector is the paper's projection layer; its output is L2-normalised,
mu = z / ||z||, and the logits are beta * M^T mu with a learnable temperature beta. Local objective (its
balanced feature loss, Eq. 6): the balanced softmax -log(n_y exp(beta m_y^T mu) / sum_c n_c exp(beta m_c^T mu))
with the client's class counts n_c. The server averages encoder, projector and beta (FedAvg).
Personalisation (its Sec. 4.3, local adaptation): before evaluation each client fine-tunes the ETF
classifier and the projector on its own data with plain CE, alternately, ``finetune_rounds`` times
(``classifier_epochs`` on M at lr ``classifier_lr``, then ``projector_epochs`` on the projector at lr
``projector_lr`` with momentum 0.9), starting from the global model. Readings: the model's own linear head
is unused; P comes from a QR decomposition of a Gaussian matrix seeded by the experiment seed; beta
starts at ``scale_init`` = 10 (the paper gives no value; at 1 the logits of unit vectors on unit class
vectors stay in [-1, 1] and training stalls: 16% global accuracy after 3 rounds on digits where FedAvg has
73%); the adaptation trains on the encoder's cached outputs (the encoder stays fixed in it)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.engine.core import Phase, derived_seed
from fedlib.errors import ConfigError
from fedlib.losses import NEG, batch_mean
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register
from fedlib.models import EXTRA, PARTS

SCALE = "extra.scale"
PERSONAL_ETF = "extra.etf"


def simplex_etf(num_classes: int, dim: int, seed: int) -> torch.Tensor:
    """(dim, K) simplex ETF: unit columns with pairwise cosine -1/(K-1) (FedETF Eq. 2)."""
    if dim < num_classes - 1 or num_classes < 2:
        raise ConfigError("model", f"feature dimension {dim}",
                          f"at least K - 1 = {num_classes - 1} dimensions for a simplex ETF of {num_classes} classes")
    gen = torch.Generator().manual_seed(seed)
    K = num_classes
    if dim >= K:        # P: K orthonormal columns in R^d
        P, _ = torch.linalg.qr(torch.randn(dim, K, generator=gen, dtype=torch.float64))
    else:               # d = K - 1: P = R Q^T, Q an orthonormal basis of the complement of 1 in R^K, R a rotation
        basis, _ = torch.linalg.qr(torch.cat([torch.ones(K, 1, dtype=torch.float64),
                                              torch.randn(K, K - 1, generator=gen, dtype=torch.float64)], 1))
        R, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
        P = R @ basis[:, 1:].T
    centred = torch.eye(K, dtype=torch.float64) - 1.0 / K
    return (math.sqrt(K / (K - 1)) * P @ centred).float()


def etf_logits(z: torch.Tensor, etf: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    return scale * F.normalize(z, dim=1) @ etf


def balanced_softmax(logits: torch.Tensor, batch, counts: torch.Tensor) -> torch.Tensor:
    """-log(n_y exp(l_y) / sum_c n_c exp(l_c)): CE on logits + log n_c (classes without samples: NEG)."""
    log_n = torch.where(counts > 0, counts.clamp_min(1).to(logits.dtype).log(), torch.full_like(logits[0], NEG))
    return batch_mean(F.cross_entropy(logits + log_n, batch.y, reduction="none"), batch)


@dataclass
class EtfHyper(Hyper):
    finetune_rounds: int = hyper(20, NON_NEGATIVE)   # alternations of the local adaptation [official code]
    classifier_epochs: int = hyper(3, POSITIVE)
    projector_epochs: int = hyper(3, POSITIVE)
    classifier_lr: float = hyper(0.1, POSITIVE)
    projector_lr: float = hyper(0.05, POSITIVE)
    # beta at round 0 (learnable); not given in the paper, see the module docstring
    scale_init: float = hyper(10.0, POSITIVE)


@register("fedetf", "FedETF", "Li, Shang, He, Lin & Wu, ICCV 2023", cite="li2023fedetf")
class FedETF(Method):
    Hyper = EtfHyper
    shared = PARTS + (EXTRA,)        # encoder, projector and the temperature beta
    personalized = True              # clients are evaluated after their local adaptation
    broadcast_keys: ClassVar[tuple[str, ...]] = ("etf",)

    def init_server(self, server, init):
        super().init_server(server, init)
        dim = next(v for k, v in init.items() if k.startswith("head.") and v.dim() == 2).shape[1]
        server.state["etf"] = simplex_etf(server.num_classes, dim, derived_seed(server.seed, 71))
        server.state["global"][SCALE] = torch.tensor(float(self.hp.scale_init))

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "etf": server.state["etf"]}

    def local_phases(self, ctx):
        return [Phase(trainable=("body", "projector", EXTRA))]

    def local_loss(self, out, batch, params, ctx):                          # Eq. 6
        return balanced_softmax(etf_logits(out.z, ctx.received["etf"], params[SCALE]), batch, ctx.counts)

    def eval_params(self, ctx):
        params = self.received_model(ctx)
        if ctx.client_id is None or not self.hp.finetune_rounds or ctx.features is None:
            return params
        return self.adapt(ctx, params)

    def adapt(self, ctx, params: dict) -> dict:
        """Local adaptation: alternate CE fine-tuning of the ETF classifier and the projector on E(x)."""
        hp = self.hp
        h = ctx.features(params).h.detach()
        y = ctx.labels
        etf = ctx.received["etf"].clone().requires_grad_(True)
        proj = {k: v.detach().clone().requires_grad_(True) for k, v in params.items() if k.startswith("projector.")}
        scale = params[SCALE].detach()
        batch = ctx.batch_size or 64
        gen = torch.Generator().manual_seed(derived_seed(ctx.seed, 73))
        opt_etf = torch.optim.SGD([etf], lr=hp.classifier_lr)
        opt_proj = torch.optim.SGD(list(proj.values()), lr=hp.projector_lr, momentum=0.9) if proj else None

        def epochs(n, opt, z_fixed=None):
            for _ in range(n):
                order = torch.randperm(len(y), generator=gen).to(y.device)
                for start in range(0, len(y), batch):
                    idx = order[start:start + batch]
                    z = z_fixed[idx] if z_fixed is not None else ctx.forward_from({**params, **proj}, h[idx]).z
                    loss = F.cross_entropy(etf_logits(z, etf, scale), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()

        for _ in range(hp.finetune_rounds):
            with torch.no_grad():                   # the projector is fixed while the classifier trains
                z_all = ctx.forward_from({**params, **proj}, h).z
            epochs(hp.classifier_epochs, opt_etf, z_all)
            if opt_proj is not None:
                epochs(hp.projector_epochs, opt_proj)
        return {**params, **{k: v.detach() for k, v in proj.items()}, PERSONAL_ETF: etf.detach()}

    def predict(self, out, ctx, variant=None):
        etf = ctx.model.get(PERSONAL_ETF, ctx.received.get("etf")) if ctx.model is not None else ctx.received["etf"]
        scale = ctx.model[SCALE] if ctx.model is not None and SCALE in ctx.model else 1.0
        return etf_logits(out.z, etf, scale).argmax(1)

    def describes_eval_params(self):
        return "the global model, adapted by each client (its ETF classifier and projector)" \
            if self.hp.finetune_rounds else None

    def describes_adaptation(self):
        hp = self.hp
        if not hp.finetune_rounds:
            return None
        return (f"{hp.finetune_rounds * (hp.classifier_epochs + hp.projector_epochs)} epochs on its own data: "
                f"{hp.finetune_rounds} alternation{'s' if hp.finetune_rounds != 1 else ''} of {hp.classifier_epochs} "
                f"on the ETF classifier (lr "
                f"{hp.classifier_lr:g}) and {hp.projector_epochs} on the projector (lr {hp.projector_lr:g}), "
                "the official code's evaluation")

    def describes_prediction(self):
        return "the closest class vector of the ETF classifier (the client's own after fine-tuning)"
