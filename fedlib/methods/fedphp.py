"""FedPHP (Li, Zhan, Shao, Li & Song, ECML-PKDD 2021): federated personalization with inherited
private models.

Each client keeps an inherited private model (HPM), a moving average of its local models over the
rounds it took part in. Locally the received global model trains with
(1 - lam) CE + lam * KD, where KD = -sum_c softmax(h(x) / T)_c log softmax(w(x))_c distils the HPM h into it
(temperature T on the teacher only); after training, HPM <- mu HPM + (1 - mu) w with
mu = 0.9 * min(n_i / ramp, 1), n_i the client's earlier participations and ``ramp`` the number of
participations over which mu grows to 0.9 (the authors' code: fraction x rounds). The server averages
the local models (FedAvg); each client predicts with its HPM. Defaults from the authors' code: KD,
lam = 0.05, T = 4. The HPM starts as the initial model. The variant "mmd" (their alternative) is not
implemented."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.losses import batch_mean, cross_entropy
from fedlib.methods.base import POSITIVE, UNIT, Hyper, Method, hyper
from fedlib.methods.registry import register
from fedlib.models import network_params


@dataclass
class PhpHyper(Hyper):
    lam: float = hyper(0.05, UNIT)
    temperature: float = hyper(4.0, POSITIVE)
    ramp: float | None = hyper(None, POSITIVE)   # participations until mu reaches 0.9; None: the number of rounds


@register("fedphp", "FedPHP", "Li et al., ECML-PKDD 2021", cite="li2021fedphp")
class FedPHP(Method):
    Hyper = PhpHyper
    personalized = True

    def init_client(self, state, init):
        state["hpm"] = {k: v.clone() for k, v in network_params(init).items()}
        state["participations"] = torch.tensor(0)

    def local_loss(self, out, batch, params, ctx):
        with torch.no_grad():
            teacher = ctx.forward(ctx.state["hpm"], batch.x).logits
        kd = batch_mean(-(F.softmax(teacher / self.hp.temperature, 1) * F.log_softmax(out.logits, 1)).sum(1), batch)
        return (1 - self.hp.lam) * cross_entropy(out.logits, batch) + self.hp.lam * kd

    def upload(self, ctx, models, result):
        ramp = self.hp.ramp or ctx.rounds
        mu = 0.9 * min(float(ctx.state["participations"]) / max(ramp, 1), 1.0)
        local = network_params(models["local"])
        ctx.state["hpm"] = {k: mu * v + (1 - mu) * local[k] if v.is_floating_point() else local[k]
                            for k, v in ctx.state["hpm"].items()}
        ctx.state["participations"] = ctx.state["participations"] + 1
        return super().upload(ctx, models, result)

    def eval_params(self, ctx):
        return ctx.state["hpm"]

    def describes_eval_params(self):
        return "each client's personalized model (its moving average of the global models)"
