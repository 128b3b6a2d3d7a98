"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

The corrected step w <- w - lr (g - c_i + c) is the gradient of CE + <w, c - c_i>, so the
correction is stated as a loss term. Server: x = sample-size weighted average of the clients'
models (global lr 1), c <- c + (1/N) sum_i delta c_i.
"""
import torch
import torch.nn.functional as F

from fedlib.aggregate import weighted_average
from fedlib.methods.base import Method


class Scaffold(Method):
    name = "scaffold"
    paper = "Karimireddy et al., ICML 2020"

    def init_server(self, server, init, clients):
        super().init_server(server, init, clients)
        server.state["control"] = {k: torch.zeros_like(v) for k, v in init.items() if v.is_floating_point()}

    def init_client(self, client, init):
        super().init_client(client, init)
        client.state["control"] = {k: torch.zeros_like(v) for k, v in init.items() if v.is_floating_point()}

    def broadcast(self, server, client):
        return {"params": server.state["global"], "control": server.state["control"]}

    def local_loss(self, out, batch, params, ctx):
        c, c_i = ctx.received["control"], ctx.client.state["control"]
        correction = sum((params[k] * (c[k] - c_i[k])).sum() for k in c if params[k].requires_grad)
        return F.cross_entropy(out.logits, batch.y) + correction

    def upload(self, ctx, params, client, executor):
        x, c = ctx.received["params"], ctx.received["control"]
        old = client.state["control"]
        # option II: c_i+ = c_i - c + (x - y_i) / (K lr)
        new = {k: old[k] - c[k] + (x[k] - params[k]) / (max(ctx.steps, 1) * ctx.lr) for k in old}
        client.state["control"] = new
        return {"params": params, "n": client.size, "delta_control": {k: new[k] - old[k] for k in new}}

    def aggregate(self, server, uploads, clients):
        ups = list(uploads.values())
        server.state["global"] = weighted_average([u["params"] for u in ups], [u["n"] for u in ups])
        control = server.state["control"]
        for k in control:
            control[k] = control[k] + sum(u["delta_control"][k] for u in ups) / len(clients)
