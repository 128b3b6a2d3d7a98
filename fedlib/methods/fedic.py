"""FEDIC (Shang, Lu, Cheung & Wang, ICME 2022): federated ensemble distillation with imbalance
calibration, for non-IID and long-tailed data.

Clients train as in FedAvg. The server holds a small balanced auxiliary set (partition parameter
``server`` = samples per class, drawn before the long tail) and, every round:
1. averages the local models (FedAvg) into G, and calibrates a copy of G with cross-entropy on the
   auxiliary set (``server_steps`` Adam steps, batches of ``batch_labeled``);
2. trains the calibration gating network on the auxiliary set: the ensemble logit is a per-sample
   weighted sum of the participants' logits, weights w_k(x) = sigmoid(s . logit_k(x) + b) normalised
   over clients (client-wise calibration), scaled and shifted per class (class-wise logit
   adjustment), and mixed with the calibrated G's logit by a gate sigmoid(g . mean_k z_k(x) + c);
3. distils the gated ensemble into G: ``distill_steps`` Adam steps of
   ld * KL(teacher / T || student / T) on ``batch_unlabeled`` images + (1 - ld) * CE on ``batch_labeled``
   labelled auxiliary images. The result is the next global model.
Defaults follow the official code (100 steps each, Adam lr 1e-3, weight decay 2e-4, T = 2, ld = 0.5,
batches 20 / 128). Offline reading: the official code distils on unlabelled CIFAR-100 images; fedlib
distils on the images of the auxiliary set itself (no second dataset). The gate's parameters persist
across rounds; the Adam states of each step are fresh every round."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.engine.core import derived_seed
from fedlib.errors import ConfigError
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, UNIT, Hyper, Method, hyper
from fedlib.methods.registry import register
from fedlib.models import network_params


@dataclass
class FedicHyper(Hyper):
    server_steps: int = hyper(100, POSITIVE)
    distill_steps: int = hyper(100, POSITIVE)
    batch_labeled: int = hyper(20, POSITIVE)
    batch_unlabeled: int = hyper(128, POSITIVE)
    lr: float = hyper(1e-3, POSITIVE)
    weight_decay: float = hyper(2e-4, NON_NEGATIVE)
    temperature: float = hyper(2.0, POSITIVE)
    ld: float = hyper(0.5, UNIT)


def gated_ensemble(gate: dict, feats: torch.Tensor, logits: torch.Tensor, calibrated: torch.Tensor) -> torch.Tensor:
    """feats (m, B, d), logits (m, B, K) of the m participants, calibrated (B, K) of the calibrated G."""
    gate = {k: v.to(logits.dtype) for k, v in gate.items()}                     # float32 or float64 uploads
    # (m, B) client-wise weights sigmoid(a_k) / sum_j sigmoid(a_j), as a softmax over clients of log sigmoid(a): the
    # same numbers, without the 0 / 0 of every client's sigmoid underflowing (logits of ~40 made a sample's NaN)
    w = F.logsigmoid(logits @ gate["scale"] + gate["bias"]).squeeze(-1).softmax(0)
    ensemble = (w.unsqueeze(-1) * logits).sum(0)
    adjusted = ensemble * gate["logit_scale"] + gate["logit_bias"]              # class-wise adjustment
    carry = torch.sigmoid(feats.mean(0) @ gate["gate_w"] + gate["gate_b"])      # (B, 1)
    return carry * adjusted + (1 - carry) * calibrated


@register("fedic", "FEDIC", "Shang, Lu, Cheung & Wang, ICME 2022", cite="shang2022fedic")
class FEDIC(Method):
    Hyper = FedicHyper
    version = 2   # 2: the client-wise weights normalised in log space (version 1 divided 0 by 0 on large logits)

    def init_server(self, server, init):
        super().init_server(server, init)
        if server.data is None:
            raise ConfigError("partition.server", None, "a positive number of samples per class held out for "
                              "FEDIC's server (e.g. --partition dirichlet alpha=0.4 server=100)")
        K, d = init["head.weight"].shape
        gen = torch.Generator().manual_seed(derived_seed(server.seed, 0, 41))
        dev = init["head.weight"].device
        server.state["gate"] = {"scale": torch.ones(K, 1, device=dev), "bias": torch.zeros(1, device=dev),
                                "logit_scale": torch.ones(K, device=dev), "logit_bias": torch.zeros(K, device=dev),
                                "gate_w": ((torch.rand(d, 1, generator=gen) * 2 - 1) / d ** 0.5).to(dev),
                                "gate_b": ((torch.rand(1, generator=gen) * 2 - 1) / d ** 0.5).to(dev)}

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)                                  # FedAvg -> G
        hp, data, fwd = self.hp, server.data, server.forward
        gen = torch.Generator().manual_seed(derived_seed(server.seed, server.round + 1, 41))
        G = network_params(server.state["global"])
        locals_ = [network_params(u["params"]) for u in uploads.values()]

        dtype = next(v.dtype for v in G.values() if v.is_floating_point())   # float32 or float64 uploads

        def batch(size):
            idx = torch.randperm(len(data.y), generator=gen)[:size].to(data.y.device)
            return data.x[idx].to(dtype), data.y[idx]

        def train(params: dict, loss_fn, steps: int, weight_decay: float) -> dict:
            leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in params.items()}
            opt = torch.optim.Adam([v for v in leaves.values() if v.requires_grad], lr=hp.lr, weight_decay=weight_decay)
            for _ in range(steps):
                loss = loss_fn(leaves)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return {k: v.detach() for k, v in leaves.items()}

        def ensemble_inputs(x):
            with torch.no_grad():
                outs = [fwd(p, x) for p in locals_]
            return torch.stack([o.z for o in outs]), torch.stack([o.logits for o in outs])

        def calibration_loss(params):                                       # 1. calibrate G on the auxiliary set
            x, y = batch(hp.batch_labeled)
            return F.cross_entropy(fwd(params, x).logits, y)

        calibrated = train(G, calibration_loss, hp.server_steps, hp.weight_decay)

        def gate_loss(gate):                                                # 2. the gating network
            x, y = batch(hp.batch_labeled)
            feats, logits = ensemble_inputs(x)
            with torch.no_grad():
                cal = fwd(calibrated, x).logits
            return F.cross_entropy(gated_ensemble(gate, feats, logits, cal), y)

        server.state["gate"] = gate = train(server.state["gate"], gate_loss, hp.server_steps, 0.0)

        def distill_loss(student):                                          # 3. calibrated distillation
            xu, _ = batch(hp.batch_unlabeled)
            feats, logits = ensemble_inputs(xu)
            with torch.no_grad():
                teacher = gated_ensemble(gate, feats, logits, fwd(calibrated, xu).logits)
            T = hp.temperature
            soft = F.kl_div(F.log_softmax(fwd(student, xu).logits / T, 1), F.softmax(teacher / T, 1),
                            reduction="batchmean")
            xl, yl = batch(hp.batch_labeled)
            return hp.ld * soft + (1 - hp.ld) * F.cross_entropy(fwd(student, xl).logits, yl)

        server.state["global"] = {**server.state["global"], **train(G, distill_loss, hp.distill_steps, hp.weight_decay)}
