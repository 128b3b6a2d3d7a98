"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The corrected step w <- w - lr (g - c_i + c) is the gradient of CE + <w, c - c_i>, so the
correction is stated as a loss term. Server (Algorithm 1, global step size 1): x <- mean over the
sampled clients of their models, unweighted (x + (1/|S|) sum_i delta y_i), c <- c + (1/N) sum_i delta c_i.
Version 1 weighted the models by sample count (FedAvg's rule), which the paper's Algorithm 1 does not.
"""
from typing import ClassVar

import torch

from fedlib.losses import cross_entropy
from fedlib.methods.base import Method
from fedlib.methods.registry import register


@register("scaffold", "SCAFFOLD", "Karimireddy et al., ICML 2020", cite="karimireddy2020scaffold")
class Scaffold(Method):
    broadcast_keys: ClassVar[tuple[str, ...]] = ("control",)
    upload_keys: ClassVar[tuple[str, ...]] = ("delta_control",)
    version = 2   # 2: the server averages the sampled clients' models uniformly (Algorithm 1)

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["control"] = {k: torch.zeros_like(v) for k, v in init.items() if v.is_floating_point()}

    def init_client(self, state, init):
        state["control"] = {k: torch.zeros_like(v) for k, v in init.items() if v.is_floating_point()}

    def broadcast(self, server, client_id):
        return {"params": server.state["global"], "control": server.state["control"]}

    def local_loss(self, out, batch, params, ctx):
        c, c_i = ctx.received["control"], ctx.state["control"]
        correction = sum((params[k] * (c[k] - c_i[k])).sum() for k in c if k in params)
        return cross_entropy(out.logits, batch) + correction

    def upload(self, ctx, models, result):
        x, c, y = ctx.received["params"], ctx.received["control"], models["local"]
        old = ctx.state["control"]
        # option II: c_i+ = c_i - c + (x - y_i) / (K lr)
        new = {k: old[k] - c[k] + (x[k] - y[k]) / (max(result.steps, 1) * ctx.lr) for k in old}
        ctx.state["control"] = new
        return {"params": y, "n": ctx.size, "delta_control": {k: new[k] - old[k] for k in new}}

    def aggregate(self, server, uploads):
        ups = list(uploads.values())
        server.state["global"] = {k: sum(u["params"][k] for u in ups) / len(ups) for k in ups[0]["params"]}
        control = server.state["control"]
        for k in control:
            control[k] = control[k] + sum(u["delta_control"][k] for u in ups) / server.num_clients
