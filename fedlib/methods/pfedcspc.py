"""pFedCSPC (Meng, Qi, Wu, Du, Li, Cui & Meng, IEEE TNNLS 2025): global generalization and local
personalization by cross silo prototypical calibration (the paper's name for CSPC).

One round (the spec's one-track reading A5: the personalized models are what clients train):
* client k starts from M_k^p (PMI, Eq. 4) or, without one, the calibrated global model, trains
  L_base + kappa (L_N + L_A + L_E) (Eq. 18, 5-7) with the encoder output f = E(x) aligned to the global
  prototypes U_g, keeps the trained model as its personal model and uploads it with its clustered
  prototypes U_k (Eq. 8-9: K-means per class on E(x), means of random r-shares of each cluster);
* the server averages the models (Eq. 2), forms U_g (Eq. 16), recalibrates the projector H and classifier
  F on the prototypes (Eq. 17: CE + eta (L_WCL + L_ACL), Eq. 10-13), builds class exemplars in the
  calibrated projector space (Eq. 14) for the global model's fused prediction (Eq. 15), and mixes every
  client's encoder from the uploaded encoders by the prototype-prediction loss of each uploaded H, F on
  that client's prototypes (Eq. 4).
Readings of the paper where it is ambiguous (spec A1-A24, also in the chapter): prototypes and f live in
the encoder output; Eq. 5 uses cosine similarity; Eq. 6 averages |cos - cos| over triplets with pairwise
different labels; Eq. 7 averages |dist - dist| over all pairs; Eq. 11 has a hinge; Eq. 12 normalises z,
sigma per pair; Eq. 14/16 average over the clients holding a class; Eq. 15 softmax-normalises both
predictions with cos/tau_g as similarity; the server schedule of Eq. 17 is FedCSPC's code (100 epochs,
batch 100, SGD, lr 0.1 / 0.01 / 0.001 by round, x0.1 every 30 epochs, weight decay 1e-5).
Switches for the ablations (Tables IV-V): ``prototypes`` ("cpm" | "tpg" = one class mean), ``calibrate``
(CA), ``augment`` (PA), ``align`` (PTA), ``kp``, ``pmi``; ``base`` the local objective (Table VI)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.aggregate import mix, select
from fedlib.engine.core import Phase, derived_seed
from fedlib.engine.evaluation import Evaluation, register_metric_set
from fedlib.errors import ConfigError
from fedlib.losses import NEG, angle_alignment, edge_alignment, prototype_infonce, weighted_supcon
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, UNIT, UNIT_POSITIVE, Hyper, TrainedModelIsPersonal, hyper
from fedlib.methods.registry import make_method, register
from fedlib.metrics import accuracy, harmonic, summarize
from fedlib.prototypes import clustered_prototypes, in_client_augmentation, mean_over_holders

BASES = ("fedavg", "fedprox", "moon", "fedasam")
CALIBRATED = ("projector", "head")


@dataclass
class CspcHyper(Hyper):
    clusters: int = hyper(2, POSITIVE)  # j, K-means clusters per class (Eq. 8); the paper's value is unreadable (H1)
    ratio: float = hyper(0.8, UNIT_POSITIVE)          # r, sampled share of a cluster (Eq. 9) [FedCSPC code]
    repeats: int = hyper(5, POSITIVE)                 # n_repeat, samplings per cluster (Eq. 9) [FedCSPC code]
    n_aug: int = hyper(5, NON_NEGATIVE)               # augmented pairs per prototype (Eq. 10), paper V-A3
    lambdas: tuple = (0.1, 0.3, 0.5)                  # lambda of Eq. 10, drawn per pair (paper V-A3)
    margin: float = hyper(1.0, NON_NEGATIVE)          # alpha of Eq. 11 (paper V-A3)
    tau_l: float = hyper(0.5, POSITIVE)               # Eq. 5
    tau_g: float = hyper(0.5, POSITIVE)               # Eq. 12 and the similarity of Eq. 15
    tau_p: float = hyper(1.0, POSITIVE)               # Eq. 4; not given in the paper
    kappa: float = hyper(0.5, NON_NEGATIVE)           # weight of L_align, Eq. 18 [FedCSPC code mu]
    eta: float = hyper(0.1, NON_NEGATIVE)             # weight in L_server, Eq. 17 [FedCSPC code re_mu, re_beta]
    lam_kp: float = hyper(0.5, UNIT)  # weight of the knowledge prediction, Eq. 15; not given in the paper
    prototypes: str = hyper("cpm", ("cpm", "tpg"))    # "cpm" (Eq. 8-9) | "tpg" (one class mean per class, Table IV)
    calibrate: bool = True                            # CA: server training of H, F (Eq. 12-13, 17)
    augment: bool = True                              # PA: L_ACL on in-client augmentations (Eq. 10-11)
    align: bool = True                                # PTA: L_align in local training (Eq. 5-7, 18)
    kp: bool = True                                   # knowledge prediction of the global model (Eq. 14-15)
    pmi: bool = True                                  # personalized model initialization (Eq. 4)
    server_epochs: int = hyper(100, POSITIVE)
    server_batch: int = hyper(100, POSITIVE)
    server_lr: float | None = hyper(None, POSITIVE)   # None: FedCSPC's schedule by round
    base: str = hyper("fedavg", BASES)                # L_base of Eq. 18 (Table VI)
    base_hyper: dict = field(default_factory=dict)

    def validate(self):
        if not self.lambdas or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                       and math.isfinite(v) and v >= 0 for v in self.lambdas):
            raise ConfigError("hyper.lambdas", self.lambdas, "a non-empty list of finite non-negative numbers")


@register("pfedcspc", "pFedCSPC", "Meng, Qi, Wu, Du, Li, Cui & Meng, IEEE TNNLS 2025", cite="meng2025pfedcspc")
class PFedCSPC(TrainedModelIsPersonal):
    Hyper = CspcHyper
    prediction_variants = ("net",)     # the global model without the knowledge prediction (Table IV's KP row)
    broadcast_keys: ClassVar[tuple[str, ...]] = ("protos", "present", "exemplars", "exemplar_mask")
    upload_keys: ClassVar[tuple[str, ...]] = ("protos", "proto_labels")

    def __init__(self, **hyper):
        super().__init__(**hyper)
        self.base = make_method(self.hp.base, **self.hp.base_hyper)
        self.uses_prototypes = self.hp.align or self.hp.calibrate or self.hp.kp or self.hp.pmi

    # ------------------------------------------------------------------ server side
    def init_server(self, server, init):
        super().init_server(server, init)
        server.state.update(protos=None, present=None, calibrated=None, exemplars=None, exemplar_mask=None,
                            client_protos={}, personal={})

    def calibrated_global(self, server) -> dict:
        return {**server.state["global"], **(server.state["calibrated"] or {})}

    def broadcast(self, server, client_id):
        params = server.state["personal"].get(client_id) if self.hp.pmi else None
        return {"params": params if params is not None else self.calibrated_global(server),
                "protos": server.state["protos"], "present": server.state["present"],
                "exemplars": server.state["exemplars"], "exemplar_mask": server.state["exemplar_mask"]}

    def global_params(self, server):
        return self.calibrated_global(server)

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)                                     # Eq. 2
        if not self.uses_prototypes:
            return
        ids = list(uploads)
        for i in ids:
            server.state["client_protos"][i] = (uploads[i]["protos"], uploads[i]["proto_labels"])
        U = torch.cat([uploads[i]["protos"] for i in ids])
        y = torch.cat([uploads[i]["proto_labels"] for i in ids])
        source = torch.cat([torch.full_like(uploads[i]["proto_labels"], j) for j, i in enumerate(ids)])
        K = server.num_classes
        server.state["protos"], server.state["present"] = mean_over_holders(U, y, source, K)    # Eq. 16
        heads = select(server.state["global"], CALIBRATED)
        if self.hp.calibrate:
            heads = self.calibrate(server, heads, U, y, source)                                 # Eq. 17
        server.state["calibrated"] = heads
        if self.hp.kp:
            with torch.no_grad():
                z = server.forward_from(heads, U).z
            server.state["exemplars"], server.state["exemplar_mask"] = mean_over_holders(z, y, source, K)  # Eq. 14
        if self.hp.pmi:
            self.personalize(server, uploads, heads)                                            # Eq. 4

    def server_lr(self, t: int, epoch: int) -> float:
        base = self.hp.server_lr or (0.1 if t <= 5 else 0.01 if t <= 40 else 0.001)
        return base * 0.1 ** (epoch // 30)

    def calibrate(self, server, heads: dict, U, y, source) -> dict:
        """Eq. 17: H, F trained on the round's real prototypes with CE (Eq. 13) + eta (L_WCL (Eq. 12) +
        L_ACL (Eq. 11) on fresh in-client augmentations (Eq. 10) each epoch)."""
        hp = self.hp
        params = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in heads.items()}
        trained = [v for v in params.values() if v.requires_grad]
        opt = torch.optim.SGD(trained, lr=self.server_lr(server.round, 0), weight_decay=1e-5)
        gen = torch.Generator().manual_seed(derived_seed(server.seed, server.round, 53))
        n = len(U)
        for epoch in range(hp.server_epochs):
            for group in opt.param_groups:
                group["lr"] = self.server_lr(server.round, epoch)
            if hp.augment and hp.n_aug:
                pos, neg, valid = in_client_augmentation(U, y, source, hp.n_aug, hp.lambdas, gen)
            order = torch.randperm(n, generator=gen).to(U.device)
            for start in range(0, n, hp.server_batch):
                idx = order[start:start + hp.server_batch]
                out = server.forward_from(params, U[idx])
                loss = F.cross_entropy(out.logits, y[idx])
                if hp.eta:
                    extra = weighted_supcon(out.z, y[idx], source[idx], hp.tau_g)
                    if hp.augment and hp.n_aug:
                        extra = extra + self.triplet(server, params, out.z, pos[idx], neg[idx], valid[idx])
                    loss = loss + hp.eta * extra
                opt.zero_grad()
                loss.backward()
                opt.step()
        return {k: v.detach() for k, v in params.items()}

    def triplet(self, server, params, z, pos, neg, valid) -> torch.Tensor:
        """Eq. 11 with a hinge: mean max(0, ||H(u) - H(u+)||^2 - ||H(u) - H(u-)||^2 + alpha) over existing pairs."""
        B, A, d = pos.shape
        zp = server.forward_from(params, pos.reshape(B * A, d)).z.view(B, A, -1)
        zn = server.forward_from(params, neg.reshape(B * A, d)).z.view(B, A, -1)
        anchor = z.unsqueeze(1)
        hinge = F.relu(((anchor - zp) ** 2).sum(-1) - ((anchor - zn) ** 2).sum(-1) + self.hp.margin)
        w = valid.to(z.dtype)
        return (hinge * w).sum() / w.sum().clamp_min(1)

    @torch.no_grad()
    def personalize(self, server, uploads, heads) -> None:
        """Eq. 4: p_k^{k'} = softmax_{k'}(-L_sup(U_k; H_k', F_k') / tau_p) over this round's uploads; client k's
        next model is sum_k' p_k^{k'} E_k' with the calibrated H, F."""
        ids = list(uploads)
        clients = sorted(server.state["client_protos"])
        losses = torch.stack([
            torch.stack([F.cross_entropy(server.forward_from(uploads[j]["params"], U).logits, labels) for j in ids])
            for U, labels in (server.state["client_protos"][k] for k in clients)])
        W = torch.softmax(-losses.double() / self.hp.tau_p, dim=1).cpu().numpy()
        bodies = mix([select(uploads[j]["params"], ("body",)) for j in ids], W)
        for k, body in zip(clients, bodies):
            server.state["personal"][k] = {**body, **heads}
        server.state["weights"] = {"pmi": W, "pmi_losses": losses.cpu().numpy()}

    # ------------------------------------------------------------------ client side
    def init_client(self, state, init):
        self.base.init_client(state, init)

    def local_phases(self, ctx):
        return [Phase(step=self.base.local_step(self.local_loss))]

    def local_loss(self, out, batch, params, ctx):
        loss = self.base.local_loss(out, batch, params, ctx)                   # L_base
        protos = ctx.received.get("protos")
        if self.hp.align and self.hp.kappa and protos is not None:            # Eq. 18: + kappa (L_N + L_A + L_E)
            present = ctx.received["present"]
            align = (prototype_infonce(out.h, batch, protos, present, self.hp.tau_l)
                     + angle_alignment(out.h, batch, protos, present) + edge_alignment(out.h, batch, protos, present))
            loss = loss + self.hp.kappa * align
        return loss

    def upload(self, ctx, models, result):
        up = self.base.upload(ctx, models, result)
        self.mark_trained(ctx)
        if self.uses_prototypes:
            h = ctx.features(models["local"]).h                               # E(x) after local training
            tpg = self.hp.prototypes == "tpg"
            up["protos"], up["proto_labels"] = clustered_prototypes(
                h, ctx.labels, ctx.num_classes, 1 if tpg else self.hp.clusters, 1 if tpg else self.hp.repeats,
                1.0 if tpg else self.hp.ratio, ctx.seed)
        return up

    # ------------------------------------------------------------------ evaluation (eval_params: the mixin's, A19)
    def predict(self, out, ctx, variant=None):
        exemplars = ctx.received.get("exemplars")
        if ctx.client_id is not None or not self.hp.kp or exemplars is None or variant == "net":
            return out.logits.argmax(1)
        # Eq. 15: (1 - lam) softmax(net) + lam softmax(cos(f_x, e_i) / tau_g), f_x = H^(E_g(x)) = out.z
        knowledge = F.normalize(out.z, dim=1) @ F.normalize(exemplars, dim=1).T / self.hp.tau_g
        knowledge = knowledge.masked_fill(~ctx.received["exemplar_mask"].unsqueeze(0), NEG)
        fused = (1 - self.hp.lam_kp) * out.logits.softmax(1) + self.hp.lam_kp * knowledge.softmax(1)
        return fused.argmax(1)

    def describes_prediction(self):
        return ("the global model: softmax of its logits fused with the cosine similarity to the exemplars "
                "(Eq. 15); each client's model: the largest logit" if self.hp.kp else "the largest logit")


# ---------------------------------------------------------------------- metric sets of this paper
def _generalization(ev: Evaluation) -> dict:
    """pFedCSPC Eq. 19-21: ACC_global of the global model, I_local (mean over clients of the
    harmonic mean of accuracy and macro-F1 on local tests) and HM, their harmonic mean; a method without
    a global model has I_local only."""
    out = {}
    if personal_local := ev.get("personal_local"):
        out["i_local"] = summarize(personal_local)["i_local"]
    if global_global := ev.get("global_global"):
        out["acc_global"] = accuracy(global_global[0])
    if len(out) == 2:
        out["hm"] = harmonic(out["acc_global"], out["i_local"])
    return out


register_metric_set("generalization", ("global_global", "personal_local"), _generalization,
                    "acc_global, i_local, hm (pFedCSPC Eq. 19-21)")
