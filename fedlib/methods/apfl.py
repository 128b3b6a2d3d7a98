"""APFL (Deng, Kamani & Mahdavi, arXiv:2003.13461, 2020): adaptive personalized federated learning.

Client i keeps a local version v_i of the model and a mixing weight alpha_i; its personalized model
is v_bar_i = alpha_i v_i + (1 - alpha_i) w_i, where w_i is its copy of the global model. Each local
step (Algorithm 1): w_i <- w_i - eta grad f_i(w_i); v_i <- v_i - eta grad_v f_i(v_bar_i);
alpha_i <- alpha_i - eta grad_alpha f_i(v_bar_i) = alpha_i - eta <v_i - w_i, grad f_i(v_bar_i)>.
The server averages the w_i (FedAvg).

In fedlib the three updates are one loss of the batch, f(w) + f(alpha v + (1 - alpha) sg(w)) with
sg() stopping the gradient: w gets grad f(w), v gets alpha grad f(v_bar), alpha gets <v - w, grad f(v_bar)>,
all at the same point, so the step is an ordinary (vmappable) step. v and alpha are client-private
"extra.*" tensors. alpha lives in [0, 1] (the paper's min over alpha in [0, 1]): it is projected back
after every step (``Phase.bounds``), as the authors' code clips it, so a step that leaves the interval
stops at its edge and the next gradient can bring it back (clipping inside the forward instead gives a
zero gradient outside [0, 1] and freezes alpha there for good: alpha at 0 made APFL FedAvg). Readings:
v starts at the initial model and alpha at ``alpha_init`` = 0.5; the personalized model at evaluation
mixes v_i with the current global model."""
from dataclasses import dataclass

import torch

from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy
from fedlib.methods.base import UNIT, Hyper, Method, hyper
from fedlib.methods.registry import register
from fedlib.models import PARTS, network_params

V = "extra.v."
ALPHA = "extra.alpha"


@dataclass
class ApflHyper(Hyper):
    alpha_init: float = hyper(0.5, UNIT)


def mixed(alpha: torch.Tensor, v: dict, w: dict, detach_w: bool = True) -> dict:
    """v_bar = alpha v + (1 - alpha) w; alpha is kept in [0, 1] by the projected step."""
    return {k: alpha * v[V + k] + (1 - alpha) * (w[k].detach() if detach_w else w[k]) for k in w}


@register("apfl", "APFL", "Deng, Kamani & Mahdavi, arXiv:2003.13461", cite="deng2020apfl")
class APFL(Method):
    Hyper = ApflHyper
    personalized = True
    version = 2   # alpha projected onto [0, 1] after each step (version 1 clipped it in the forward: frozen at 0)

    def receive(self, ctx):
        models = super().receive(ctx)
        local = models["local"]
        if ALPHA not in local:  # first participation: v = the initial model, alpha = alpha_init
            local.update({V + k: v.clone() for k, v in network_params(ctx.model).items() if v.is_floating_point()})
            local[ALPHA] = torch.tensor(float(self.hp.alpha_init))
        return models

    def local_phases(self, ctx):
        return [Phase(trainable=PARTS + ("extra",), bounds=((ALPHA, 0.0, 1.0),))]

    def local_loss(self, out, batch, params, ctx):
        w = {k: p for k, p in params.items() if not k.startswith("extra.")}
        personal = ctx.forward(mixed(params[ALPHA], params, w), batch.x)
        return cross_entropy(out.logits, batch) + cross_entropy(personal.logits, batch)

    def eval_params(self, ctx):
        w = self.received_model(ctx)
        if ALPHA not in ctx.model:  # never trained: the global model
            return w
        net = network_params(w)
        float_keys = {k for k, v in net.items() if v.is_floating_point()}
        mix = mixed(ctx.model[ALPHA], ctx.model, {k: net[k] for k in float_keys})
        return {**net, **mix}

    def describes_eval_params(self):
        return "each client's mix alpha v + (1 - alpha) w of its own model v and the global model w"
