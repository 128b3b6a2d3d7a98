"""FedNTD (Lee, Jeong, Shin, Bae & Yun, NeurIPS 2022): preserve the global model's knowledge of the classes a
client does not see by not-true distillation.

Local loss (its Eq. 6): CE(q, y) + beta * tau^2 * KL(q~_g^tau || q~^tau), where q~^tau is the softmax at
temperature tau over the logits without the true class (the "not-true" classes) and q~_g^tau the same for
the frozen received global model. Server: FedAvg. Defaults beta = 1, tau = 1 (the paper's)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.losses import NEG, batch_mean, cross_entropy
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class NtdHyper(Hyper):
    beta: float = hyper(1.0, NON_NEGATIVE)
    tau: float = hyper(1.0, POSITIVE)


def not_true_distillation(student: torch.Tensor, teacher: torch.Tensor, batch, tau: float) -> torch.Tensor:
    """tau^2 * mean over the batch of KL(softmax(teacher/tau) || softmax(student/tau)) over the classes
    other than each sample's label."""
    true = batch.y.unsqueeze(1) == torch.arange(student.shape[1], device=student.device)   # vmap-safe one-hot
    log_p_student = F.log_softmax((student / tau).masked_fill(true, NEG), dim=1)
    log_p_teacher = F.log_softmax((teacher / tau).masked_fill(true, NEG), dim=1)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).masked_fill(true, 0.0).sum(1)
    return tau ** 2 * batch_mean(kl, batch)


@register("fedntd", "FedNTD", "Lee, Jeong, Shin, Bae & Yun, NeurIPS 2022", cite="lee2022fedntd")
class FedNTD(Method):
    Hyper = NtdHyper

    def local_loss(self, out, batch, params, ctx):
        with torch.no_grad():
            teacher = ctx.forward(ctx.received["params"], batch.x).logits
        return cross_entropy(out.logits, batch) + self.hp.beta * not_true_distillation(out.logits, teacher, batch,
                                                                                       self.hp.tau)
