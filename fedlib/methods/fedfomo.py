"""FedFomo (Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021): personalized federated learning with
first-order model optimization.

Each round the server sends client i the latest models of M other clients, chosen epsilon-greedily by
the affinities it has accumulated (its Section 3.2); client i weights each by the validation-loss gain
per parameter distance (its Eq. 5),
  w_n = max(L_i(theta_i) - L_i(theta_n), 0) / ||theta_n - theta_i||,   normalised to sum 1,
moves to theta_i + sum_n w_n (theta_n - theta_i) (Eq. 6; its own model when no w_n is positive), trains
locally and uploads. L_i is the loss on a held-out 20% of the client's data. The server adds w_n to the
affinity of i for n. No global model. Defaults: M = 5, epsilon 0.3 decaying by 0.05 per round (a
reading: the paper anneals epsilon without stating the schedule)."""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.engine.core import derived_seed
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, UNIT, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class FomoHyper(Hyper):
    models: int = hyper(5, POSITIVE)
    epsilon: float = hyper(0.3, UNIT)
    epsilon_decay: float = hyper(0.05, NON_NEGATIVE)


def validation_loss(ctx, params) -> float:
    return float(F.cross_entropy(ctx.validation(params).logits, ctx.validation_labels))


def distance(a: dict, b: dict) -> float:
    return float(torch.sqrt(sum(((a[k] - b[k]).double() ** 2).sum() for k in a if a[k].is_floating_point())))


def fomo_weights(own_loss: float, losses: list[float], distances: list[float]) -> np.ndarray:
    """Eq. 5: gain in validation loss per unit of parameter distance, clipped at 0, normalised."""
    w = np.array([max(own_loss - loss, 0.0) / max(d, 1e-12) for loss, d in zip(losses, distances)])
    return w / w.sum() if w.sum() > 0 else w


@register("fedfomo", "FedFomo", "Zhang, Sapra, Fidler, Yeung & Alvarez, ICLR 2021", cite="zhang2021fedfomo")
class FedFomo(Method):
    Hyper = FomoHyper
    personalized = True
    has_global_model = False
    validation_fraction = 0.2
    broadcast_keys: ClassVar[tuple[str, ...]] = ("candidates", "candidate_ids")
    upload_keys: ClassVar[tuple[str, ...]] = ("fomo_ids", "fomo_weights")

    def allocation(self, num_classes, feature_dim, num_clients, model_bytes):
        """Every client receives ``models`` of the others' models each round (at most all of them)."""
        return {"models": num_clients * min(self.hp.models, num_clients) * model_bytes}

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["models"] = {}
        server.state["affinity"] = np.zeros((server.num_clients, server.num_clients))

    def choose(self, server, client_id) -> list[int]:
        others = [j for j in sorted(server.state["models"]) if j != client_id]
        m = min(self.hp.models, len(others))
        rng = np.random.default_rng(derived_seed(server.seed, server.round, client_id, 71))
        eps = max(0.0, self.hp.epsilon - self.hp.epsilon_decay * server.round)
        if rng.random() < eps:
            return sorted(rng.choice(others, m, replace=False).tolist())
        affinity = server.state["affinity"][client_id, others] + 1e-9 * rng.random(len(others))  # random ties
        return sorted(np.asarray(others)[np.argsort(-affinity)[:m]].tolist())

    def broadcast(self, server, client_id):
        if client_id is None:
            return {}
        chosen = self.choose(server, client_id)
        return {"candidates": [server.state["models"][j] for j in chosen], "candidate_ids": chosen}

    def receive(self, ctx):
        own = ctx.model
        candidates = ctx.received.get("candidates") or []
        if not candidates:
            ctx.state["fomo"] = ([], [])
            return {"local": own}
        own_loss = validation_loss(ctx, own)
        w = fomo_weights(
            own_loss, [validation_loss(ctx, c) for c in candidates], [distance(c, own) for c in candidates]
        )
        ctx.state["fomo"] = (list(ctx.received["candidate_ids"]), w.tolist())
        if w.sum() == 0:
            return {"local": own}
        start = {k: v + sum(wn * (c[k] - v) for wn, c in zip(w, candidates)) if v.is_floating_point() else v
                 for k, v in own.items()}
        return {"local": start}

    def upload(self, ctx, models, result):
        ids, w = ctx.state["fomo"]
        return {"params": models["local"], "n": ctx.size, "fomo_ids": ids, "fomo_weights": w}

    def aggregate(self, server, uploads):
        for i, up in uploads.items():
            server.state["models"][i] = up["params"]
            for j, w in zip(up["fomo_ids"], up["fomo_weights"]):
                server.state["affinity"][i, j] += w

    def eval_params(self, ctx):
        return ctx.model

    def describes_eval_params(self):
        return "each client's own model (its weighted mix of the models it downloaded)"
    def round_log(self, server):
        return {"affinity": np.asarray(server.state["affinity"]).round(4).tolist()}
