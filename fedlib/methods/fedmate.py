"""FedMate (Yang, Li, Wang, Yu, Wu & He, ECAI 2025): complementary knowledge fusion in federated
learning by re-calibration and merit-discrimination.

Model w_i = (theta_i extractor, phi_i classifier). Per round, client i:
0. receives the global prototypes P, the global classifier phi^g (under its own key: phi_i is never
   overwritten) and, in rounds after the extractor was aggregated, the global extractor (CFT);
1. computes its prototypes P_i (Eq. 1) with the extractor it now has;
2. trains the classifier alone (``cls_epochs`` at ``cls_lr``) on CE + lambda_c * l_ccf (Eq. 3), where
   l_ccf = mean_k CE(g(phi_i; P_ik), k) + kappa_t l_adv and kappa_t = 1 - t / t_max; per mini-batch,
   two discriminators first take one step each (merit-discrimination, Section 3.3):
   D_pr tells g(phi_i; P_k) (real) from g(phi_i; P_ik) (fake) for the client's classes,
   D_cl tells g(phi^g; P_k) (real) from g(phi_i; P_k) (fake) for every class with a global prototype;
   then phi_i takes one step, the generator trying to make its fakes look real;
3. trains the extractor alone on CE + lambda_p * MSE(z, P_y) (the "center loss to global prototypes");
4. uploads phi_i, its prototypes after training, its class counts, and theta_i only in the rounds of
   the CFT schedule (Eq. 4).
The server (Section 3.5-3.6): global prototypes by the three-way weighting MPS (Eq. 5-6), the global
classifier row by row from the holders' rows weighted by class counts (Eq. 7) and then one step of
gradient descent on the global prototypes (Eq. 8); the extractor averaged by |D_i| when uploaded.

The paper's appendices (algorithm, hyperparameters) are missing and the official code does not run;
the readings follow ../shared/specs/fedmate.md (ambiguities A1-A24), in short:
* A1 GAN: D outputs P(fake) and trains with binary cross-entropy (target 1 = the local side); the
  generator uses the non-saturating form -log(1 - D(fake)). A2/A3: each discriminator is
  Linear(K, 32)-ReLU-Linear(32, 1) on classifier logits, persisting across rounds and initialised from
  the client's seed; SGD lr 1e-3, momentum 0.5, weight decay 5e-4, one step per mini-batch before the
  classifier's, its momentum fresh every round. A4: D_pr sees the client's classes only. A5: D_cl is
  the paper's binary game (the code's WGAN-GP critic is not implemented).
* A6: means over the batch and over classes; lambda_c = lambda_p = 1. A7: kappa_t = 1 - t/t_max, t
  0-based. Round 0 (no global prototypes) trains the classifier on CE + the local-prototype CE only.
* A8/A9: Eq. 7 as sum_i alpha_ik phi_ik over the class's holders (weight row and bias); a class nobody
  holds keeps its row and prototype. A10: Eq. 8 is ``server_steps`` = 1 step of lr ``eta`` = 0.01 on
  the sum over present classes of CE(g(phi; P_k), k).
* A11: beta_ik is the softmax over holders of the previous global classifier's class-k logit on P_ik.
  A12: the cosine weights l are clamped at 0 and renormalised (uniform when all vanish). A13: one MPS
  weighting per class, JS divergences over the class's holders, natural log.
* A15: CFT uploads the extractor except in rounds t with (t + 1) mod period == 0, period =
  max(1, floor(x q)), q = Par(theta) / (K d); ``cft_x`` = 1 (the code's x). At short runs CFT never
  skips a round unless ``cft_x`` is smaller.
* A16: the personalized model evaluated is the client's own classifier on the current global
  extractor (fedlib's rule for split models), the extractor the client would use.
* A21 ablation switches ``mps``, ``cft``, ``cci``, ``ccf``: off means count-weighted prototypes, the
  extractor shared every round, a size-weighted head average without Eq. 8, and a CE-only classifier
  phase.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.aggregate import select, weighted_average
from fedlib.engine.core import Batch, Phase, derived_seed
from fedlib.losses import cross_entropy, prototype_mse
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, PrototypeSharing, hyper
from fedlib.methods.registry import register
from fedlib.models import network_params
from fedlib.prototypes import aggregate_prototypes

BODY = ("body", "projector")


@dataclass
class MateHyper(Hyper):
    lambda_c: float = hyper(1.0, NON_NEGATIVE)
    lambda_p: float = hyper(1.0, NON_NEGATIVE)
    eta: float = hyper(0.01, NON_NEGATIVE)
    server_steps: int = hyper(1, POSITIVE)
    cft_x: float = hyper(1.0, POSITIVE)
    cls_epochs: int = hyper(1, POSITIVE)
    cls_lr: float = hyper(0.1, POSITIVE)
    d_lr: float = hyper(1e-3, POSITIVE)
    d_hidden: int = hyper(32, POSITIVE)
    mps: bool = True
    cft: bool = True
    cci: bool = True
    ccf: bool = True

# ---------------------------------------------------------------------- the pieces, as functions
def discriminator_init(num_classes: int, hidden: int, gen: torch.Generator) -> dict:
    """Linear(K, hidden)-ReLU-Linear(hidden, 1) with PyTorch's default uniform initialisation."""
    def uniform(shape, fan_in):
        return (torch.rand(shape, generator=gen) * 2 - 1) / math.sqrt(fan_in)
    return {"w1": uniform((hidden, num_classes), num_classes), "b1": uniform((hidden,), num_classes),
            "w2": uniform((1, hidden), hidden), "b2": uniform((1,), hidden)}


def discriminate(d: dict, logits: torch.Tensor) -> torch.Tensor:
    """The discriminator's logit of P(fake) for each row of classifier logits."""
    return (F.relu(logits @ d["w1"].T + d["b1"]) @ d["w2"].T + d["b2"]).squeeze(-1)


def discriminator_loss(d: dict, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """BCE with target 0 for the real inputs and 1 for the fake ones (A1), means over each set."""
    r, f = discriminate(d, real), discriminate(d, fake)
    return F.binary_cross_entropy_with_logits(r, torch.zeros_like(r)) + \
        F.binary_cross_entropy_with_logits(f, torch.ones_like(f))


def generator_loss(d: dict, fake: torch.Tensor) -> torch.Tensor:
    """Non-saturating: -log(1 - D(fake)), i.e. BCE of the fakes against the real label."""
    f = discriminate(d, fake)
    return F.binary_cross_entropy_with_logits(f, torch.zeros_like(f))


def head_logits(head: dict, z: torch.Tensor) -> torch.Tensor:
    return F.linear(z, head["head.weight"].to(z.dtype), head["head.bias"].to(z.dtype))


def js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence of two distributions (natural log)."""
    m = 0.5 * (p + q)
    kl = lambda a, b: (a * (torch.log(a.clamp_min(1e-12)) - torch.log(b.clamp_min(1e-12)))).sum()  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def mps_weights(counts: torch.Tensor, protos: torch.Tensor, prev_logit_k: torch.Tensor) -> torch.Tensor:
    """Eq. 5 and MPS for one class over its holders: alpha (class counts), l (cosine to the mean
    prototype, clamped at 0), beta (softmax of the previous global classifier's class logit), mixed
    with W_mps = softmax(-[JS(a,l)+JS(a,b), JS(l,a)+JS(l,b), JS(b,a)+JS(b,l)])."""
    alpha = counts / counts.sum()
    anchor = protos.mean(0)
    cos = F.cosine_similarity(protos, anchor.unsqueeze(0), dim=1).clamp_min(0) + 1e-12
    ell = cos / cos.sum()
    beta = torch.softmax(prev_logit_k, 0)
    parts = (alpha, ell, beta)
    score = torch.stack([js(parts[a], parts[(a + 1) % 3]) + js(parts[a], parts[(a + 2) % 3]) for a in range(3)])
    w_mps = torch.softmax(-score, 0)
    return w_mps[0] * alpha + w_mps[1] * ell + w_mps[2] * beta


def cft_period(body_params: int, num_classes: int, dim: int, x: float) -> int:
    """Eq. 4: q = Par(theta) / Par(prototype set), the extractor skipped when (t + 1) % floor(x q) == 0."""
    return max(1, int(x * body_params / (num_classes * dim)))


@register("fedmate", "FedMate", "Yang, Li, Wang, Yu, Wu & He, ECAI 2025", cite="yang2025fedmate")
class FedMate(PrototypeSharing):
    Hyper = MateHyper
    shared = BODY
    personalized = True
    has_global_model = True   # the global extractor with the global classifier (never reported by the paper)

    # ------------------------------------------------------------------ server
    broadcast_keys: ClassVar[tuple[str, ...]] = ("global_head",)
    upload_keys: ClassVar[tuple[str, ...]] = ("head",)
    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["body_fresh"] = True       # round 0: everyone starts from the same extractor

    def broadcast(self, server, client_id):
        msg = {"protos": server.state["protos"], "present": server.state["present"],
               "global_head": select(server.state["global"], ("head",))}
        msg["params"] = select(server.state["global"], BODY) if server.state["body_fresh"] else {}
        return msg

    def allocation(self, num_classes, feature_dim, num_clients, model_bytes):
        """Two discriminators per client (Linear(K, d_hidden)-ReLU-Linear(d_hidden, 1)), float32, kept in
        every client's state."""
        return {"d_hidden": 2 * num_clients * (self.hp.d_hidden * (num_classes + 2) + 1) * 4}

    def uploads_body(self, round_: int, body_params: int, num_classes: int, dim: int) -> bool:
        if not self.hp.cft:
            return True
        return (round_ + 1) % cft_period(body_params, num_classes, dim, self.hp.cft_x) != 0

    def aggregate(self, server, uploads):
        ups = list(uploads.values())
        protos = torch.stack([u["protos"] for u in ups])                            # (m, K, d)
        counts = torch.stack([u["counts"] for u in ups]).to(protos.dtype)           # (m, K)
        prev_head = select(server.state["global"], ("head",))
        old, old_present = server.state["protos"], server.state["present"]
        # 1. global prototypes: MPS (Eq. 5-6) or count-weighted; classes nobody holds keep theirs
        if self.hp.mps:
            K = counts.shape[1]
            new = torch.zeros_like(protos[0])
            has = counts > 0
            for k in range(K):
                holders = has[:, k]
                if holders.any():
                    logit_k = head_logits(prev_head, protos[holders, k])[:, k]
                    w = mps_weights(counts[holders, k], protos[holders, k], logit_k)
                    new[k] = (w.unsqueeze(1) * protos[holders, k]).sum(0)
            present = has.any(0)
        else:
            new, present = aggregate_prototypes(protos, counts)
        if old is not None:
            new = torch.where(present.unsqueeze(1), new, old)
            present = present | old_present
        server.state["protos"], server.state["present"] = new, present
        # 2. the global classifier: Eq. 7 row by row, then Eq. 8 on the prototypes (CCI)
        heads = [u["head"] for u in ups]
        if self.hp.cci:
            share = counts / counts.sum(0, keepdim=True).clamp_min(1)                # alpha_ik over holders
            W = torch.einsum("mk,mkd->kd", share.to(heads[0]["head.weight"].dtype),
                             torch.stack([h["head.weight"] for h in heads]))
            b = (share * torch.stack([h["head.bias"] for h in heads])).sum(0)
            held = counts.sum(0) > 0
            head = {"head.weight": torch.where(held.unsqueeze(1), W, prev_head["head.weight"]),
                    "head.bias": torch.where(held, b, prev_head["head.bias"])}
            head = self.calibrate(head, new, present)
        else:
            head = weighted_average(heads, [u["n"] for u in ups])
        # 3. the extractor, when the schedule uploaded it (CFT)
        bodies = [(u["params"], u["n"]) for u in ups if u.get("params")]
        body = weighted_average([p for p, _ in bodies], [n for _, n in bodies]) if bodies else {}
        server.state["global"] = {**server.state["global"], **body, **head}
        server.state["body_fresh"] = bool(bodies)

    def calibrate(self, head: dict, protos: torch.Tensor, present: torch.Tensor) -> dict:
        """Eq. 8: gradient steps of the global classifier on the global prototypes."""
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in head.items()}
        labels = torch.arange(len(protos), device=protos.device)[present]
        for _ in range(self.hp.server_steps):
            loss = F.cross_entropy(head_logits(leaves, protos[present]), labels, reduction="sum")
            grads = torch.autograd.grad(loss, list(leaves.values()))
            leaves = {
                k: (v - self.hp.eta * g).detach().requires_grad_(True) for (k, v), g in zip(leaves.items(), grads)
            }
        return {k: v.detach() for k, v in leaves.items()}

    # ------------------------------------------------------------------ client
    def receive(self, ctx):
        models = super().receive(ctx)
        state = ctx.state
        if "dpr" not in state:  # the discriminators, drawn from the client's seed the first time
            gen = torch.Generator().manual_seed(derived_seed(ctx.seed, 17))
            state["dpr"] = discriminator_init(ctx.num_classes, self.hp.d_hidden, gen)
            state["dcl"] = discriminator_init(ctx.num_classes, self.hp.d_hidden, gen)
        counts, protos, _ = self.local_statistics(ctx, models["local"])   # Eq. 1, before training (A17)
        ctx.scratch["local_protos"], ctx.scratch["local_has"] = protos, counts > 0
        return models

    def local_phases(self, ctx):
        classifier = Phase(trainable=("head",), epochs=self.hp.cls_epochs, lr=self.hp.cls_lr,
                           step=self.classifier_step if self.hp.ccf else None,
                           loss=None if self.hp.ccf else self.ce_loss)
        return [classifier, Phase(trainable=BODY)]

    def ce_loss(self, out, batch, params, ctx):
        return cross_entropy(out.logits, batch)

    def classifier_step(self, batch, params, ctx):
        """One mini-batch of the classifier phase: D_pr and D_cl step, then phi_i steps on Eq. 3."""
        state, rec = ctx.state, ctx.received
        local_p, local_has = ctx.scratch["local_protos"], ctx.scratch["local_has"]
        glob, present = rec["protos"], rec["present"]
        kappa = 1 - ctx.round / ctx.rounds
        adversarial = glob is not None
        if adversarial:
            with torch.no_grad():
                fake_pr = head_logits(params, local_p[local_has])
                real_pr = head_logits(params, glob[local_has & present])
                fake_cl = head_logits(params, glob[present])
                real_cl = head_logits(rec["global_head"], glob[present])
            self.discriminator_step(state, ctx.scratch, ("dpr", real_pr, fake_pr), ("dcl", real_cl, fake_cl))
        out = ctx.forward(params, batch.x)
        labels = torch.arange(ctx.num_classes, device=batch.y.device)
        ccf = cross_entropy(head_logits(params, local_p[local_has]), Batch(local_p[local_has], labels[local_has]))
        if adversarial:
            adv = generator_loss(state["dpr"], head_logits(params, local_p[local_has])) + \
                generator_loss(state["dcl"], head_logits(params, glob[present]))
            ccf = ccf + kappa * adv
        loss = cross_entropy(out.logits, batch) + self.hp.lambda_c * ccf
        grads = torch.autograd.grad(loss, list(params.values()))
        for p, g in zip(params.values(), grads):
            p.grad = g
        return loss.detach()

    def discriminator_step(self, state: dict, scratch: dict, *games) -> None:
        """One SGD step (momentum 0.5, weight decay 5e-4, as the official code) of each discriminator; the
        momentum buffers start fresh every round (``scratch``)."""
        momentum = scratch.get("d_momentum") or {}
        for name, real, fake in games:
            d = {k: v.detach().requires_grad_(True) for k, v in state[name].items()}
            grads = dict(zip(d, torch.autograd.grad(discriminator_loss(d, real, fake), list(d.values()))))
            new = {}
            for k, v in d.items():
                g = grads[k] + 5e-4 * v.detach()
                buf = momentum.get((name, k))
                buf = g if buf is None else 0.5 * buf + g
                momentum[(name, k)] = buf
                new[k] = (v - self.hp.d_lr * buf).detach()
            state[name] = new
        scratch["d_momentum"] = momentum

    def local_loss(self, out, batch, params, ctx):
        """The extractor phase: CE + lambda_p * MSE to the global prototype of each sample's class."""
        return cross_entropy(out.logits, batch) + self.hp.lambda_p * prototype_mse(
            out.z, batch, ctx.received["protos"], ctx.received["present"])

    def upload(self, ctx, models, result):
        up = super().upload(ctx, models, result)        # prototypes after training (A17), counts, params
        local = models["local"]
        body = select(local, BODY)
        d = up["protos"].shape[1]
        n_body = sum(v.numel() for v in body.values() if v.is_floating_point())
        if not self.uploads_body(ctx.round, n_body, ctx.num_classes, d):
            up["params"] = {}                           # CFT: this round the extractor stays home
        up["head"] = select(local, ("head",))
        return up

    def global_params(self, server):
        return network_params(server.state["global"])
