"""FedMate's components (discriminator and generator losses, MPS weights, Eq. 7-8, CFT) and FedFA
against hand-computed values."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.spatial.distance import jensenshannon

from fedlib.data.partition import class_counts, partition
from fedlib.engine.client import local_update
from fedlib.engine.core import Server
from fedlib.experiment import build, make_config, run
from fedlib.methods.fedfa import anchor_loss
from fedlib.methods.fedmate import (
    FedMate,
    cft_period,
    discriminate,
    discriminator_loss,
    generator_loss,
    js,
    mps_weights,
)

DIGITS = dict(dataset="digits", partition={"name": "skew", "s": 20, "n": 60, "k": 3}, num_clients=6, rounds=2,
              local_epochs=1, batch_size=20, lr=0.05)


def linear_discriminator(a: float, b: float) -> dict:
    """A discriminator whose P(fake)-logit is a * relu(x_0) + b (a 1-unit hidden layer reading logit 0)."""
    return {"w1": torch.tensor([[1.0, 0.0]]), "b1": torch.zeros(1), "w2": torch.tensor([[a]]), "b2": torch.tensor([b])}


def test_discriminator_and_generator_losses_by_hand():
    d = linear_discriminator(2.0, -1.0)
    real, fake = torch.tensor([[0.5, 9.0]]), torch.tensor([[1.5, 0.0]])
    s_real, s_fake = 2 * 0.5 - 1, 2 * 1.5 - 1              # logits of P(fake): 0 and 2
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected_d = -math.log(1 - sig(s_real)) - math.log(sig(s_fake))    # real -> 0, fake -> 1
    assert math.isclose(float(discriminator_loss(d, real, fake)), expected_d, rel_tol=1e-6)
    assert math.isclose(float(generator_loss(d, fake)), -math.log(1 - sig(s_fake)), rel_tol=1e-6)  # non-saturating
    assert float(discriminate(d, real)) == pytest.approx(0.0)


def test_mps_weights_against_an_independent_computation():
    counts = torch.tensor([10.0, 30.0, 60.0])
    protos = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.2, 1.0]])
    logits = torch.tensor([0.5, -1.0, 2.0])
    alpha = counts.numpy() / counts.sum().item()
    anchor = protos.numpy().mean(0)
    cos = np.array([p @ anchor / np.linalg.norm(p) / np.linalg.norm(anchor) for p in protos.numpy()])
    ell = cos / cos.sum()
    beta = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum()
    J = lambda p, q: jensenshannon(p, q) ** 2  # noqa: E731  (scipy returns the distance, the square root)
    score = np.array([J(alpha, ell) + J(alpha, beta), J(ell, alpha) + J(ell, beta), J(beta, alpha) + J(beta, ell)])
    w = np.exp(-score) / np.exp(-score).sum()
    expected = w[0] * alpha + w[1] * ell + w[2] * beta
    got = mps_weights(counts, protos, logits).numpy()
    assert np.allclose(got, expected, atol=1e-6) and np.isclose(got.sum(), 1)
    assert math.isclose(float(js(torch.tensor(alpha), torch.tensor(beta))), J(alpha, beta), rel_tol=1e-6)


def test_eq7_rows_and_eq8_step_on_the_server():
    method = FedMate(mps=False)
    server = Server(num_clients=2)
    init = {"body.w": torch.zeros(1), "head.weight": torch.zeros(2, 1), "head.bias": torch.zeros(2)}
    method.init_server(server, init)
    uploads = {0: {"params": {"body.w": torch.tensor([1.0])}, "n": 10, "counts": torch.tensor([3, 0]),
                   "protos": torch.tensor([[1.0], [0.0]]),
                   "head": {"head.weight": torch.tensor([[2.0], [5.0]]), "head.bias": torch.tensor([1.0, 1.0])}},
               1: {"params": {"body.w": torch.tensor([3.0])}, "n": 30, "counts": torch.tensor([1, 4]),
                   "protos": torch.tensor([[3.0], [2.0]]),
                   "head": {"head.weight": torch.tensor([[6.0], [7.0]]), "head.bias": torch.tensor([0.0, 3.0])}}}
    method.aggregate(server, uploads)
    # Eq. 7: row 0 = 3/4 * 2 + 1/4 * 6 = 3, bias 0.75; row 1 only client 1: 7, bias 3
    W0, b0 = torch.tensor([[3.0], [7.0]]), torch.tensor([0.75, 3.0])
    P = torch.tensor([[1.5], [2.0]])                                          # count-weighted prototypes
    assert torch.allclose(server.state["protos"], P)
    Wl, bl = W0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    loss = F.cross_entropy(P @ Wl.T + bl, torch.tensor([0, 1]), reduction="sum")
    gW, gb = torch.autograd.grad(loss, [Wl, bl])
    assert torch.allclose(server.state["global"]["head.weight"], W0 - 0.01 * gW, atol=1e-6)   # Eq. 8, eta 0.01
    assert torch.allclose(server.state["global"]["head.bias"], b0 - 0.01 * gb, atol=1e-6)
    assert torch.allclose(server.state["global"]["body.w"], torch.tensor([2.5]))               # |D_i| weights


def test_cft_schedule_skips_every_period_th_round():
    assert cft_period(78_912, 10, 128, 1.0) == 61                  # cnn2 on FMNIST (spec A15)
    method = FedMate(cft_x=0.05)                                    # period 3
    rounds = [t for t in range(9) if not method.uploads_body(t, 78_912, 10, 128)]
    assert rounds == [2, 5, 8]
    assert all(FedMate(cft=False).uploads_body(t, 78_912, 10, 128) for t in range(9))


def test_fedmate_round_keeps_the_local_head_and_skips_adversarial_terms_at_round_0():
    fed = build(make_config(method="fedmate", **DIGITS))
    task = fed.task(fed.clients[0], 0)
    assert task.received["protos"] is None and set(task.received["params"]) == {
        k for k in task.model if k.startswith("body")
    }
    result = local_update(fed.method, task, fed.setup, fed.trainer)
    assert "head" in result.upload and result.upload["params"]               # extractor uploaded (no CFT skip)
    d0 = {k: v.clone() for k, v in result.state["dpr"].items()}
    fed.run_round(0)
    task1 = fed.task(fed.clients[0], 1)
    assert "head.weight" not in task1.received["params"]                     # phi_i is never overwritten
    result1 = local_update(fed.method, task1, fed.setup, fed.trainer)
    assert any(not torch.equal(d0[k], result1.state["dpr"][k]) for k in d0)   # discriminators train from round 1


def test_fedmate_learns_and_ablations_run():
    for hp in ({}, {"mps": False, "cft": False, "cci": False, "ccf": False}):
        record = run(make_config(method="fedmate", hyper=hp, eval_personal_global=True, **DIGITS),
                     cache_dir=None, progress=False)
        assert record["final"]["personal_local_acc"] > 0.3


def test_repeat_ratio_partition():
    labels = np.repeat(np.arange(10), 100)
    parts = partition(labels, 10, 10, {"name": "iid", "repeat": 0.5}, 0)
    repeats = [len(p) - len(np.unique(p)) for p in parts]
    assert sum(r > 0 for r in repeats) == 5                  # half of the clients
    assert sorted(set(repeats)) == [0, 50]                   # 50 other samples replaced by one: 51 copies
    assert class_counts(labels, parts, 10).sum() == 1000


# ---------------------------------------------------------------------- FedFA
def test_fedfa_anchor_loss_by_hand():
    z = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 0, 1])
    anchors = torch.tensor([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    # class 0: mean(1, 9) = 5; class 1: 1; class 2 absent: 0; / K = 3
    assert math.isclose(float(anchor_loss(z, y, anchors)), 6 / 3, rel_tol=1e-6)


def test_fedfa_calibration_and_anchor_aggregation():
    fed = build(make_config(method="fedfa", model="mlp", **DIGITS))
    anchors = fed.server.state["anchors"]
    assert torch.equal(anchors, torch.eye(anchors.shape[1])[:10])
    task = fed.task(fed.clients[0], 0)
    before = F.cross_entropy(F.linear(anchors, task.model["head.weight"], task.model["head.bias"]), torch.arange(10))
    result = local_update(fed.method, task, fed.setup, fed.trainer)
    after = F.cross_entropy(F.linear(anchors, result.model["head.weight"], result.model["head.bias"]), torch.arange(10))
    assert after < before                                    # the head learnt to classify the anchors
    held = result.upload["counts"] > 0
    assert not torch.equal(result.upload["anchors"][held], anchors[held])
    assert torch.equal(result.upload["anchors"][~held], anchors[~held])
    fed.run_round(0)
    assert not torch.equal(fed.server.state["anchors"], anchors)
