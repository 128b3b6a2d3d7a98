"""FedPRP (Guo, Wang, Lin, Kou & Geng, IEEE TNNLS 2024): federated prototype rectification with
personalization for skewed (long-tailed and non-IID) data.

Model theta_k = (mu_k, nu_k): shared representation f_mu (body + projector) and a private head g_nu.
Local update of client k (Eq. 3-4, Section V-A-2 "t + s = 30"): the head trains alone for
``head_epochs`` = s epochs with cross-entropy, then the body for ``body_epochs`` = t epochs with the
head frozen and the total loss (Eq. 11)

    L = L_CE + lam * L_ID + (1 - lam) * L_IC

* L_ID (Eq. 9), inter-class discrimination, in the mini-batch form of DRO-LT (the normalisation of
  FedPRP's and DRO-LT's code): for every class c in the batch, with fixed anchors C~(c) and logits
  l_cj = (-d(C~(c), z_j) - eps_c [y_j = c]) / tau over all samples j of the batch,
  L_ID = mean_c mean_{i: y_i = c} (-l_ci + logsumexp_j l_cj).
* L_IC (Eq. 10), intra-class consistency: squared distance of z to the global prototype of its class.
* Server: mu = uniform mean of the participants' bodies (Eq. 5); global prototypes by a moving average
  C^(n) <- beta C^(n) + (1 - beta) mean_{k holds n} C_k^(n), a class seen for the first time takes the
  mean (Eq. 8).
* Inference (Eq. 12): nearest prototype, the client's own prototypes with its own body for the personal
  model, the global prototypes with the global body for the global model.

Readings where the paper is ambiguous (spec ../shared/specs/fedprp.md, ambiguities A1-A20):
* A1 schedule: two phases, head then body (the official code's 5 + 25 epochs).
* A2 the head is private and persists across rounds (paper); ``share_head=True`` averages it (code).
* A3 anchors C~ are the client's Eq. 7 prototypes under the received body, computed once before the
  body phase (eval mode, whole local data, no augmentation).
* A4 eps: a margin per class, fixed at ``eps_init`` = 1 (default since version 2): what the official code
  does in effect (it creates eps = 1 as a parameter every round but never lets it train in the body
  phase) and what DRO-LT initialises. The paper calls eps learnable, but dL_ID/deps >= 0 always (a larger
  margin on the positive never lowers the loss), so descent on this loss can only shrink it: with
  ``learn_eps=True`` eps trains in the body phase, persists per client and is used as max(eps, 0) (only the
  loss is clamped, eps itself is not projected); at the chapter's paper configuration (25 body epochs)
  every held class has eps <= 0 after round 1, i.e. no margin at all from then on. Book scale, FMNIST
  shards, 3 seeds, last round: learnable 53.25 +- 3.58 A_loc / 70.97 +- 12.04 A_sel, fixed 1 52.07 +- 4.13 /
  67.58 +- 10.36, fixed 0 (no margin) 57.29 +- 0.93 / 64.70 +- 5.61: within the seed spread of each other.
* A5 d: the paper says "KL divergence" between a prototype and a feature vector; DRO-LT's code uses
  the Euclidean distance: ``distance="euclidean"`` (default), "sqeuclidean", "cosine" (1 - cos), and
  "code_cosine" (d = cos, the official code's sign, which rewards positives far from their anchor;
  for an ablation only).
* A6 tau = 0.07 (code). A7 L_IC normalised as a mean over samples and feature dimensions, samples
  without a global prototype counted in the denominator (``ic="mse"``, the code's nn.MSELoss, which
  lam = 0.5 was tuned with); ``ic="sum_sq"`` is Eq. 10 literally (sum over dimensions).
* A8 the moving average lives on the server with beta weighting the old value (Eq. 8);
  ``ema="client"`` is the code's per-client average (weight 0.5) and a plain mean on the server.
* A9 uploaded prototypes: an eval-mode pass over the client's data after training.
* A10/A11 predictions: the default is Eq. 12 with the client's prototypes padded by global ones for
  classes it lacks; variants "logits" (the classifier), "global_protos" (nearest global prototype) and
  "restricted" (nearest own prototype among the client's classes only, the code's protocol).
* A12 the personal model at evaluation uses the client's own last-trained body. A20: a client without
  prototypes predicts with the global prototypes, and with its classifier before any exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.aggregate import select, weighted_average
from fedlib.engine.core import Phase
from fedlib.engine.core import cross_entropy_loss as ce_loss
from fedlib.engine.evaluation import Evaluation, prefixed, register_metric_set, register_test_set
from fedlib.engine.protocol import Participation, ParticipationSpec, UniformParticipation, register_participation
from fedlib.errors import check
from fedlib.losses import NEG, cross_entropy, sample_weight
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, UNIT, GlobalPrototypes, Hyper, hyper
from fedlib.methods.registry import register
from fedlib.metrics import accuracy, frequency_groups, group_accuracy, summarize
from fedlib.models import PARTS

DISTANCES = ("euclidean", "sqeuclidean", "cosine", "code_cosine")


@dataclass
class PrpHyper(Hyper):
    lam: float = hyper(0.5, UNIT)                      # L_ID vs L_IC (Eq. 11)
    beta: float = hyper(0.5, UNIT)  # moving average of global prototypes (Eq. 8), weight of the old value
    head_epochs: int = hyper(5, NON_NEGATIVE)          # s
    body_epochs: int = hyper(25, POSITIVE)             # t
    tau: float = hyper(0.07, POSITIVE)
    distance: str = hyper("euclidean", DISTANCES)
    eps_init: float = hyper(1.0, NON_NEGATIVE)
    learn_eps: bool = False  # A4: fixed margin (the official code's effect); True: trained, only ever shrinks
    ic: str = hyper("mse", ("mse", "sum_sq"))          # mse | sum_sq
    ema: str = hyper("server", ("server", "client"))   # server | client
    share_head: bool = False
    use_id: bool = True                                # Table VIII
    use_ic: bool = True



def anchor_distances(anchors: torch.Tensor, z: torch.Tensor, kind: str) -> torch.Tensor:
    """d(C~(c), z_j) for every anchor c and sample j: (K, B)."""
    if kind in ("cosine", "code_cosine"):
        cos = F.normalize(anchors, dim=1) @ F.normalize(z, dim=1).T
        return 1 - cos if kind == "cosine" else cos
    sq = ((anchors.unsqueeze(1) - z.unsqueeze(0)) ** 2).sum(-1)
    return sq if kind == "sqeuclidean" else sq.clamp_min(1e-12).sqrt()


def discrimination_loss(z: torch.Tensor, batch, anchors: torch.Tensor, eps: torch.Tensor, tau: float,
                        distance: str = "euclidean") -> torch.Tensor:
    """L_ID (Eq. 9, DRO-LT mini-batch form): mean over the batch's classes c of the mean over its
    samples i of -l_ci + logsumexp_j l_cj, l_cj = (-d(C~(c), z_j) - eps_c [y_j = c]) / tau."""
    y = batch.y
    K = anchors.shape[0]
    w = sample_weight(batch)
    w = torch.ones(y.shape, dtype=z.dtype, device=z.device) if w is None else w
    positive = (y.unsqueeze(0) == torch.arange(K, device=y.device).unsqueeze(1)).to(z.dtype) * w    # (K, B)
    logits = (-anchor_distances(anchors, z, distance) - eps.clamp_min(0).unsqueeze(1) * positive) / tau
    lse = torch.logsumexp(logits.masked_fill(w.unsqueeze(0) == 0, NEG), dim=1)                    # (K,)
    n = positive.sum(1)
    per_class = (-(logits * positive).sum(1) + lse * n) / n.clamp_min(1)
    present = (n > 0).to(z.dtype)
    return (per_class * present).sum() / present.sum().clamp_min(1)


def consistency_loss(z: torch.Tensor, batch, protos: torch.Tensor | None, present, kind: str = "mse") -> torch.Tensor:
    """L_IC (Eq. 10): ||z - C^(y)||^2 for samples whose class has a global prototype, averaged over the
    batch's samples (all of them in the denominator), and over dimensions too for ``kind="mse"``."""
    if protos is None:
        return z.sum() * 0.0
    y = batch.y
    w = sample_weight(batch)
    w = torch.ones(y.shape, dtype=z.dtype, device=z.device) if w is None else w
    keep = w * present[y].to(z.dtype)
    sq = ((z - protos[y]) ** 2).sum(1)
    scale = z.shape[1] if kind == "mse" else 1
    return (sq * keep).sum() / (w.sum() * scale).clamp_min(1e-12)


def moving_average(old: torch.Tensor | None, old_present, new: torch.Tensor, new_present, beta: float):
    """Eq. 8: where a class has a new mean, beta * old + (1 - beta) * mean, or the mean for a class
    seen for the first time; other classes keep their old prototype."""
    if old is None:
        return torch.where(new_present.unsqueeze(1), new, torch.zeros_like(new)), new_present.clone()
    both = (old_present & new_present).unsqueeze(1)
    blended = torch.where(both, beta * old + (1 - beta) * new, torch.where(new_present.unsqueeze(1), new, old))
    return blended, old_present | new_present


def nearest(z: torch.Tensor, protos: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    d = torch.cdist(z, protos)
    return d.masked_fill(~allowed.unsqueeze(0), float("inf")).argmin(1)


@register("fedprp", "FedPRP", "Guo et al., IEEE TNNLS 2024", cite="guo2024fedprp")
class FedPRP(GlobalPrototypes):
    Hyper = PrpHyper
    shared: tuple[str, ...] = ("body", "projector")
    personalized = True
    has_global_model = True       # the global body with the global prototypes (A_glo)
    prediction_variants = ("logits", "global_protos", "restricted")
    version = 2   # eps fixed at eps_init by default (A4); version 1 trained it
    upload_keys: ClassVar[tuple[str, ...]] = ("protos", "counts")

    def __init__(self, **hyper):
        super().__init__(**hyper)
        if self.hp.share_head:
            self.shared = PARTS

    # ------------------------------------------------------------------ server
    def aggregate(self, server, uploads):
        ups = list(uploads.values())
        body = weighted_average([u["params"] for u in ups], [1.0] * len(ups))       # Eq. 5: uniform
        server.state["global"] = {**server.state["global"], **body}
        protos = torch.stack([u["protos"] for u in ups])
        holds = torch.stack([u["counts"] for u in ups]) > 0                          # (m, K)
        n = holds.sum(0)
        mean = (protos * holds.unsqueeze(-1)).sum(0) / n.clamp_min(1).unsqueeze(-1)   # uniform over holders
        old, old_present = server.state["protos"], server.state["present"]
        if self.hp.ema == "client":   # the code: clients average over rounds, the server keeps this round's means
            if old is None:
                server.state["protos"], server.state["present"] = mean, n > 0
            else:
                server.state["protos"] = torch.where((n > 0).unsqueeze(1), mean, old)
                server.state["present"] = old_present | (n > 0)
        else:
            server.state["protos"], server.state["present"] = moving_average(
                old, old_present, mean, n > 0, self.hp.beta
            )

    # ------------------------------------------------------------------ client
    def receive(self, ctx):
        models = super().receive(ctx)
        local = models["local"]
        if "extra.eps" not in local:
            local["extra.eps"] = torch.full((ctx.num_classes,), float(self.hp.eps_init))
        if self.hp.use_id:  # A3: anchors = the client's prototypes under the received body, fixed for this update
            ctx.scratch["anchors"] = self.local_statistics(ctx, local)[1]
        return models

    def local_phases(self, ctx):
        body = ("body", "projector") + (("extra",) if self.hp.learn_eps and self.hp.use_id else ())
        phases = [Phase(trainable=body, epochs=self.hp.body_epochs)]
        if self.hp.head_epochs:  # the head alone first (no weight decay on it, as in the code)
            phases.insert(0, Phase(trainable=("head",), epochs=self.hp.head_epochs, loss=ce_loss, weight_decay=0.0))
        return phases

    def local_loss(self, out, batch, params, ctx):
        hp = self.hp
        loss = cross_entropy(out.logits, batch)
        if hp.use_id:  # eps is trained in this phase (learn_eps) or fixed at its initial value
            eps = params.get("extra.eps")
            if eps is None:
                eps = torch.full((ctx.num_classes,), float(hp.eps_init), device=out.z.device)
            loss = loss + hp.lam * discrimination_loss(out.z, batch, ctx.scratch["anchors"], eps, hp.tau, hp.distance)
        if hp.use_ic:
            loss = loss + (1 - hp.lam) * consistency_loss(out.z, batch, ctx.received["protos"],
                                                          ctx.received["present"], hp.ic)
        return loss

    def upload(self, ctx, models, result):
        counts, protos, _ = self.local_statistics(ctx, models["local"])              # Eq. 7, after training
        if self.hp.ema == "client" and "protos" in ctx.state:
            seen = (ctx.state["counts"] > 0).unsqueeze(1)
            protos = torch.where(seen, 0.5 * protos + 0.5 * ctx.state["protos"], protos)
        ctx.state["protos"], ctx.state["counts"] = protos, counts.long()
        return {"params": select(models["local"], self.shared), "protos": protos, "counts": counts.long()}

    # ------------------------------------------------------------------ evaluation
    def eval_params(self, ctx):
        # A12: the client's own last-trained body and head; before it ever trained, what it receives
        return dict(ctx.model) if "protos" in ctx.state else self.received_model(ctx)

    def predict(self, out, ctx, variant=None):
        glob, present = ctx.received.get("protos"), ctx.received.get("present")
        if variant == "logits" or (glob is None and "protos" not in ctx.state):
            return out.logits.argmax(1)
        if ctx.client_id is None or "protos" not in ctx.state or variant == "global_protos":
            return nearest(out.z, glob, present) if glob is not None else out.logits.argmax(1)
        own, holds = ctx.state["protos"], ctx.state["counts"] > 0
        if variant == "restricted":
            return nearest(out.z, own, holds)
        if glob is None:
            return nearest(out.z, own, holds)
        padded = torch.where(holds.unsqueeze(1), own, glob)                          # A11: pad with global
        return nearest(out.z, padded, holds | present)

    def describes_eval_params(self):
        return "each client's own last-trained body and head"

    def describes_prediction(self):
        return ("the nearest prototype: the client's own padded with the global ones (the global model: the "
                "global prototypes)")


# ---------------------------------------------------------------------- participation of Table VII
@dataclass(frozen=True)
class LateClients(Participation):
    """FedPRP Table VII: the last ``late`` clients join at round ``at_round`` (0-based). Before it the others
    take part (a ``fraction`` of them, drawn as ``UniformParticipation`` draws); from it on only the late
    ones do."""
    late: int
    at_round: int
    fraction: float = 1.0

    def clients(self, num_clients: int, seed: int, round_: int) -> list[int]:
        if round_ >= self.at_round:
            return list(range(num_clients - self.late, num_clients))
        return UniformParticipation(self.fraction).clients(num_clients - self.late, seed, round_)


def _check_late_clients(fields: dict, num_clients: int, rounds: int) -> None:
    late, at = fields["late_clients"], fields["late_round"]
    check(isinstance(late, (int, np.integer)) and 0 <= late < num_clients, "late_clients", late,
          f"a number of clients in [0, num_clients={num_clients})")
    check(isinstance(at, (int, np.integer)) and 0 < at < rounds, "late_round", at,
          f"a round in (0, rounds={rounds}) at which the late clients join")


# a config selects it with late_clients > 0; its two fields are config fields under these names (records keep keys)
register_participation(ParticipationSpec(
    "late_clients", lambda f: LateClients(f["late_clients"], f["late_round"], f["fraction"]), "late_clients",
    _check_late_clients, "FedPRP Table VII: the last late_clients clients join at round late_round",
    fields=(("late_clients", 0), ("late_round", 0))))


# ---------------------------------------------------------------------- metric sets of this paper
def _class_groups(ev: Evaluation) -> dict:
    """Accuracy on FedPRP's Many / Medium / Few classes and their mean ("average"), for the global
    model on the global test set and for client models on it (pooled over clients)."""
    out = {}
    for prefix, family in (("global", "global_global"), ("personal_global", "personal_global")):
        confs = ev.get(family)
        if not confs:
            continue
        C = np.sum(confs, axis=0)
        groups = {g: group_accuracy(C, idx) for g, idx in frequency_groups(ev.train_counts.sum(0)).items()}
        out.update({f"{prefix}_{g}": v for g, v in groups.items()})
        out[f"{prefix}_groups_average"] = float(np.nanmean(list(groups.values())))
    return out


def _fedprp(ev: Evaluation) -> dict:
    """FedPRP's A_glo (global model, balanced test), A_loc (mean over clients of their model on the
    balanced test) and A_sel (mean over clients of their model on their own local test)."""
    out = {}
    if global_global := ev.get("global_global"):
        out["a_glo"] = accuracy(global_global[0])
    if personal_global := ev.get("personal_global"):
        out["a_loc"] = float(np.mean([accuracy(C) for C in personal_global]))
    if personal_local := ev.get("personal_local"):
        out["a_sel"] = float(np.mean([accuracy(C) for C in personal_local]))
    return out


def _own_classes(ev: Evaluation) -> dict:
    confs = ev.get("personal_own")
    return prefixed("personal_own", summarize(confs)) if confs else {}


def own_class_test_indices(test_labels: np.ndarray, train_counts: np.ndarray, seed: int) -> list[np.ndarray]:
    """Per client, test images of the classes it trains on only: each class's test images are split
    evenly over the clients holding it (the official FedPRP code's protocol; the union over clients is
    the whole test set of the classes anyone holds)."""
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in train_counts]
    for c in range(train_counts.shape[1]):
        holders = np.flatnonzero(train_counts[:, c] > 0)
        if len(holders):
            for i, share in zip(
                holders, np.array_split(rng.permutation(np.flatnonzero(test_labels == c)), len(holders))
            ):
                parts[i].append(share)
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, dtype=np.int64) for p in parts]


def _own_class_test_set(fed) -> list[torch.Tensor] | None:
    data = fed.data
    if data.data.test_domain is not None:   # feature-shift data: clients are tested on their own domain
        return None
    own = own_class_test_indices(data.data.test_y.cpu().numpy(), data.train_counts, data.seed + 2)
    return [torch.as_tensor(p, dtype=torch.int64, device=data.data.test_y.device) for p in own]


register_test_set("own", _own_class_test_set,
                  description="each client's share of the test images of the classes it holds (official code)")
register_metric_set("class_groups", ("global_global", "personal_global"), _class_groups,
                    "accuracy on Many / Medium / Few classes (FedPRP)")
register_metric_set("fedprp", ("global_global", "personal_global", "personal_local"), _fedprp,
                    "a_glo, a_loc, a_sel (FedPRP Section V-A-3)")
register_metric_set("own_classes", ("personal_own",), _own_classes,
                    "personal_own_*: client models on test images of their own classes (FedPRP's code)")
