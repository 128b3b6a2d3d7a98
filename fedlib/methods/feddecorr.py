"""FedDecorr (Shi, Liang, Zhang, Tan & Bai, ICLR 2023): against dimensional collapse of the representations
under heterogeneous data.

Local loss: CE + beta * L_FedDecorr, L_FedDecorr = ||K||_F^2 / d^2 with K the d x d correlation matrix of the
mini-batch's representations z (each dimension standardised over the batch: zero mean, unit variance).
Server: FedAvg. beta = 0.1 (the paper's value for CIFAR-10)."""
from dataclasses import dataclass

import torch

from fedlib.losses import cross_entropy, sample_weight
from fedlib.methods.base import NON_NEGATIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class DecorrHyper(Hyper):
    beta: float = hyper(0.1, NON_NEGATIVE)


def decorrelation(z: torch.Tensor, batch, eps: float = 1e-8) -> torch.Tensor:
    """||K||_F^2 / d^2 of the batch correlation matrix K (padding samples carry weight 0)."""
    w = sample_weight(batch)
    w = torch.ones(len(z), dtype=z.dtype, device=z.device) if w is None else w.to(z.dtype)
    n = w.sum().clamp_min(1.0)
    centred = z - (w.unsqueeze(1) * z).sum(0) / n
    variance = (w.unsqueeze(1) * centred ** 2).sum(0) / n
    standard = centred / (variance + eps).sqrt()
    K = (w.unsqueeze(1) * standard).T @ standard / n
    return (K ** 2).sum() / z.shape[1] ** 2


@register("feddecorr", "FedDecorr", "Shi, Liang, Zhang, Tan & Bai, ICLR 2023", cite="shi2023feddecorr")
class FedDecorr(Method):
    Hyper = DecorrHyper

    def local_loss(self, out, batch, params, ctx):
        return cross_entropy(out.logits, batch) + self.hp.beta * decorrelation(out.z, batch)
