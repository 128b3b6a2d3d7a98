"""FedProc (Mu, Shen, Cheng, Geng, Fu, Zhang & Zhang, FGCS 2023): prototypical contrastive federated learning.

Clients upload the class means of their projector features z (count-weighted into global prototypes c_k
by the server, as FedProto). Local loss in round t (its official code): alpha CE + (1 - alpha) L_pc with
alpha = t / T (CE only in round 0), L_pc = -log exp(z . c^_y) / sum_k exp(z . c^_k), c^ the L2-normalised
global prototypes of the classes that have one. Server: FedAvg of the models."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.losses import NEG, cross_entropy, sample_weight
from fedlib.methods.base import Hyper, PrototypeSharing
from fedlib.methods.registry import register


@dataclass
class ProcHyper(Hyper):
    pass


def prototype_contrast(z: torch.Tensor, batch, protos: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """-log softmax_k(z . c^_k) at the label, over classes with a prototype; samples of other classes skipped."""
    logits = (z @ F.normalize(protos, dim=1).T).masked_fill(~present.bool().unsqueeze(0), NEG)
    per_sample = torch.logsumexp(logits, 1) - logits.gather(1, batch.y.unsqueeze(1)).squeeze(1)
    keep = present[batch.y].to(z.dtype)
    w = sample_weight(batch)
    keep = keep if w is None else keep * w
    return (per_sample * keep).sum() / keep.sum().clamp_min(1e-12)


@register("fedproc", "FedProc", "Mu, Shen, Cheng, Geng, Fu, Zhang & Zhang, FGCS 2023", cite="mu2023fedproc")
class FedProc(PrototypeSharing):
    Hyper = ProcHyper

    def local_loss(self, out, batch, params, ctx):
        ce = cross_entropy(out.logits, batch)
        protos = ctx.received["protos"]
        if protos is None or ctx.round == 0:
            return ce
        alpha = ctx.round / ctx.rounds
        return alpha * ce + (1 - alpha) * prototype_contrast(out.z, batch, protos, ctx.received["present"])
