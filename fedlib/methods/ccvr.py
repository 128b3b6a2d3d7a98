"""CCVR (Luo, Chen, Hu, Zhang, Liang & Feng, NeurIPS 2021): classifier calibration with virtual
representations.

Clients train as in FedAvg and also send, per class c they hold, the mean mu_{c,k} and the unbiased
covariance Sigma_{c,k} of their features z (the classifier's input) under the trained model. The server
pools them into the global class statistics (its Eq. 3-4):
  mu_c = sum_k (N_{c,k}/N_c) mu_{c,k}
  Sigma_c = sum_k (N_{c,k}-1)/(N_c-1) Sigma_{c,k} + sum_k N_{c,k}/(N_c-1) mu_{c,k} mu_{c,k}^T - N_c/(N_c-1) mu_c mu_c^T,
draws ``virtual`` features per class from N(mu_c, Sigma_c) and retrains the classifier on them with
cross-entropy (the body stays as averaged). CCVR is post-hoc: the calibrated classifier is the global
model's for evaluation; clients keep training from the plain FedAvg model (nothing of the calibration
is sent back into training). Reading: fedlib calibrates after every round so that every evaluation
sees the calibrated model (the paper calibrates once, after training: the last round is the same).
Defaults: 2,000 virtual features per class, 10 epochs, batch 64, SGD lr 0.01 (the paper's M_c; epochs
and lr are not stated there)."""
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlib.aggregate import select
from fedlib.engine.core import derived_seed
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper, retrain_linear_head
from fedlib.methods.registry import register
from fedlib.prototypes import class_stats


@dataclass
class CcvrHyper(Hyper):
    virtual: int = hyper(2000, POSITIVE)
    epochs: int = hyper(10, POSITIVE)
    batch: int = hyper(64, POSITIVE)
    lr: float = hyper(0.01, POSITIVE)


def client_class_statistics(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Counts (K,), means (K, d) and unbiased covariances (K, d, d) of z per class (zeros where n_c < 2)."""
    counts, sums, _ = class_stats(z, y, num_classes)
    means = sums / counts.clamp_min(1).unsqueeze(1)
    centred = z - means[y]
    scatter = torch.stack([centred[y == c].T @ centred[y == c] for c in range(num_classes)])
    return counts, means, scatter / (counts - 1).clamp_min(1).view(-1, 1, 1)


def pooled_statistics(counts: torch.Tensor, means: torch.Tensor, covs: torch.Tensor):
    """CCVR Eq. 3-4 over clients: counts (m, K), means (m, K, d), covs (m, K, d, d) -> (K,), (K, d), (K, d, d)."""
    total = counts.sum(0)
    mu = (counts.unsqueeze(-1) * means).sum(0) / total.clamp_min(1).unsqueeze(-1)
    denom = (total - 1).clamp_min(1).view(-1, 1, 1)
    outer = means.unsqueeze(-1) * means.unsqueeze(-2)
    sigma = (((counts - 1).clamp_min(0).view(*counts.shape, 1, 1) * covs).sum(0)
             + (counts.view(*counts.shape, 1, 1) * outer).sum(0)
             - total.view(-1, 1, 1) * mu.unsqueeze(-1) * mu.unsqueeze(-2)) / denom
    return total, mu, sigma


def sample_virtual(mu: torch.Tensor, sigma: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """n draws from N(mu, sigma); sigma symmetrised and made positive definite by a small jitter."""
    d = len(mu)
    sigma = 0.5 * (sigma + sigma.T).double()
    jitter = 1e-6 * max(float(sigma.diagonal().mean()), 1e-6)
    for _ in range(8):
        L, info = torch.linalg.cholesky_ex(sigma + jitter * torch.eye(d, dtype=sigma.dtype))
        if int(info) == 0:
            break
        jitter *= 10
    noise = torch.randn(n, d, generator=gen, dtype=torch.float64)
    return (mu.double().cpu() + noise @ L.T.cpu()).to(mu.dtype).to(mu.device)


@register("ccvr", "CCVR", "Luo, Chen, Hu, Zhang, Liang & Feng, NeurIPS 2021", cite="luo2021ccvr")
class CCVR(Method):
    Hyper = CcvrHyper
    broadcast_keys: ClassVar[tuple[str, ...]] = ("calibrated_head",)
    upload_keys: ClassVar[tuple[str, ...]] = ("counts", "means", "covs")

    def allocation(self, num_classes, feature_dim, num_clients, model_bytes):
        """The virtual features of every class at once: float64 draws, their float32 copy and the labels."""
        return {"virtual": num_classes * self.hp.virtual * (feature_dim * (8 + 4) + 8)}

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["calibrated_head"] = None

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "calibrated_head": server.state["calibrated_head"]}

    def upload(self, ctx, models, result):
        z = ctx.features(models["local"]).z
        counts, means, covs = client_class_statistics(z, ctx.labels, ctx.num_classes)
        return {**super().upload(ctx, models, result), "counts": counts.long(), "means": means, "covs": covs}

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ups = list(uploads.values())
        total, mu, sigma = pooled_statistics(torch.stack([u["counts"] for u in ups]).to(ups[0]["means"].dtype),
                                             torch.stack([u["means"] for u in ups]),
                                             torch.stack([u["covs"] for u in ups]))
        gen = torch.Generator().manual_seed(derived_seed(server.seed, server.round, 61))
        classes = [c for c in range(len(total)) if total[c] > 0]
        feats = torch.cat([sample_virtual(mu[c], sigma[c], self.hp.virtual, gen) for c in classes])
        labels = torch.tensor(classes, device=feats.device).repeat_interleave(self.hp.virtual)
        server.state["calibrated_head"] = retrain_linear_head(select(server.state["global"], ("head",)), feats, labels,
                                                              self.hp.epochs, self.hp.batch, self.hp.lr, gen)

    def global_params(self, server):
        return {**server.state["global"], **(server.state["calibrated_head"] or {})}

    def eval_params(self, ctx):
        """The calibrated global model (what evaluation-time fine-tuning starts from)."""
        return {**self.received_model(ctx), **(ctx.received.get("calibrated_head") or {})}

    def describes_eval_params(self):
        return "the global model with the server's calibrated classifier"
