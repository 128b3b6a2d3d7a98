"""FedPRP (Eq. 5, 8-12) and the baselines of its chapter (APFL, FedRoD, FedPHP, CReFF, FEDIC):
each distinctive step against hand-computed values."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.engine.core import Batch, Out, Server
from fedlib.errors import ConfigError
from fedlib.experiment import build, make_config, run
from fedlib.methods.apfl import ALPHA, APFL, V, mixed
from fedlib.methods.creff import class_gradients, gradient_distance
from fedlib.methods.fedic import gated_ensemble
from fedlib.methods.fedprp import FedPRP, consistency_loss, discrimination_loss, moving_average
from fedlib.methods.fedrod import P_BIAS, P_WEIGHT

DIGITS = dict(dataset="digits", partition={"name": "shards", "s": 3, "imbalance": 0.5}, num_clients=4, rounds=2,
              local_epochs=1, batch_size=32, lr=0.05)


# ---------------------------------------------------------------------- FedPRP
def test_eq8_moving_average_new_class_takes_the_mean_absent_class_unchanged():
    old = torch.tensor([[1.0, 1.0], [5.0, 5.0], [0.0, 0.0]])
    old_present = torch.tensor([True, True, False])
    new = torch.tensor([[3.0, 3.0], [9.0, 9.0], [7.0, 7.0]])
    new_present = torch.tensor([True, False, True])
    protos, present = moving_average(old, old_present, new, new_present, beta=0.25)
    assert torch.allclose(protos[0], torch.tensor([0.25 * 1 + 0.75 * 3] * 2))   # blended
    assert torch.equal(protos[1], old[1])                                       # nobody held class 1
    assert torch.equal(protos[2], new[2])                                       # first time: the mean
    assert present.tolist() == [True, True, True]


def test_eq5_and_eq8_server_averages_are_uniform_not_count_weighted():
    method = FedPRP()
    server = Server(num_clients=2)
    init = {"body.w": torch.zeros(2), "head.w": torch.zeros(1)}
    method.init_server(server, init)
    uploads = {0: {"params": {"body.w": torch.tensor([0.0, 2.0])}, "protos": torch.tensor([[1.0], [2.0]]),
                   "counts": torch.tensor([100, 0])},
               1: {"params": {"body.w": torch.tensor([4.0, 6.0])}, "protos": torch.tensor([[3.0], [8.0]]),
                   "counts": torch.tensor([1, 5])}}
    method.aggregate(server, uploads)
    assert torch.allclose(server.state["global"]["body.w"], torch.tensor([2.0, 4.0]))  # (0 + 4) / 2, not by size
    assert torch.allclose(
        server.state["protos"], torch.tensor([[2.0], [8.0]])
    )  # (1 + 3) / 2; only client 1 holds class 1


def test_eq9_discrimination_loss_by_hand():
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    y = torch.tensor([0, 0, 1, 1])
    anchors = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    eps = torch.tensor([0.5, 0.0])
    tau = 1.0
    d = torch.cdist(anchors, z)
    logit = -d - eps[:, None] * (y[None, :] == torch.arange(2)[:, None]).float()
    lse = torch.logsumexp(logit / tau, 1)
    per_class = [np.mean([-(logit[c, i] / tau) + lse[c] for i in range(4) if y[i] == c]) for c in range(2)]
    expected = float(np.mean(per_class))
    got = float(discrimination_loss(z, Batch(z, y), anchors, eps, tau))
    assert math.isclose(got, expected, rel_tol=1e-5)
    # padding with zero-weight samples changes nothing
    zp, yp = torch.cat([z, z[:1]]), torch.cat([y, y[:1]])
    padded = discrimination_loss(zp, Batch(zp, yp, torch.tensor([1.0, 1, 1, 1, 0])), anchors, eps, tau)
    assert math.isclose(float(padded), expected, rel_tol=1e-5)


def test_eq9_loss_falls_when_positives_move_to_their_anchor():
    """Guards the sign: the official code's -cosine reverses it ("code_cosine")."""
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    far = torch.tensor([[0.2, 0.9], [0.9, 0.2]])
    near = torch.tensor([[0.9, 0.1], [0.1, 0.9]])
    eps = torch.ones(2)
    for distance in ("euclidean", "sqeuclidean", "cosine"):
        assert discrimination_loss(near, Batch(near, y), anchors, eps, 0.07, distance) < \
            discrimination_loss(far, Batch(far, y), anchors, eps, 0.07, distance)
    assert discrimination_loss(near, Batch(near, y), anchors, eps, 0.07, "code_cosine") > \
        discrimination_loss(far, Batch(far, y), anchors, eps, 0.07, "code_cosine")


def test_eq10_consistency_loss_by_hand_and_zero_before_prototypes():
    z = torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 3.0]])
    y = torch.tensor([0, 1, 2])
    protos = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    present = torch.tensor([True, True, False])
    # sample 0: 1 + 4 = 5; sample 1: 2; sample 2 has no prototype but stays in the denominator
    assert math.isclose(float(consistency_loss(z, Batch(z, y), protos, present, "sum_sq")), 7 / 3, rel_tol=1e-6)
    assert math.isclose(float(consistency_loss(z, Batch(z, y), protos, present, "mse")), 7 / 6, rel_tol=1e-6)
    assert float(consistency_loss(z, Batch(z, y), None, None)) == 0.0


def test_fedprp_keeps_its_margin_fixed_by_default():
    """A4: eps stays at eps_init (the official code's effect): the body phase does not train it."""
    fed = build(make_config(method="fedprp", hyper={"head_epochs": 1, "body_epochs": 1, "eps_init": 0.7}, **DIGITS))
    ctx = fed.context(fed.task(fed.clients[0], 0))
    head, body = fed.method.local_phases(ctx)
    assert set(body.trainable) == {"body", "projector"}
    from fedlib.engine.client import local_update
    result = local_update(fed.method, fed.task(fed.clients[0], 0), fed.setup, fed.trainer)
    assert torch.equal(result.model["extra.eps"], torch.full((fed.data.num_classes,), 0.7))


def test_the_margin_gradient_is_never_negative_so_a_learned_margin_only_shrinks():
    """dL_ID/deps_c = (1/tau) * mean over positives of (1 - softmax weight of the positive) >= 0: one sample
    z = (0, 0) of class 0 with anchors at (0, 0) and (1, 0), eps = (0.5, 0.5), tau = 1: logits over the batch
    l_00 = -0 - 0.5, the positive is the only sample, so L = -l_00 + logsumexp(l_00) = 0 and dL/deps = 0; a
    second sample of class 1 at (1, 0) adds a negative for anchor 0 (l_01 = -1), and dL/deps_0 =
    1 - e^-0.5 / (e^-0.5 + e^-1) > 0."""
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    y = torch.tensor([0, 1])
    anchors = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    eps = torch.tensor([0.5, 0.5], requires_grad=True)
    loss = discrimination_loss(z, Batch(z, y), anchors, eps, 1.0)
    (grad,) = torch.autograd.grad(loss, eps)
    p_pos = math.exp(-0.5) / (math.exp(-0.5) + math.exp(-1.0))
    assert grad[0].item() == pytest.approx((1 - p_pos) / 2, rel=1e-5)   # mean over the two classes present
    assert (grad >= 0).all()


def test_fedprp_phases_freeze_the_other_part_and_learned_margins_persist():
    fed = build(make_config(method="fedprp", hyper={"head_epochs": 1, "body_epochs": 1, "learn_eps": True},
                            **DIGITS))
    ctx = fed.context(fed.task(fed.clients[0], 0))
    head, body = fed.method.local_phases(ctx)
    assert head.trainable == ("head",) and set(body.trainable) == {"body", "projector", "extra"}
    start = {k: v.clone() for k, v in fed.method.receive(ctx)["local"].items()}
    from fedlib.engine.client import local_update
    result = local_update(fed.method, fed.task(fed.clients[0], 0), fed.setup, fed.trainer)
    moved = {k for k in start if not torch.equal(start[k], result.model[k])}
    assert {"head.weight", "body.0.0.weight", "extra.eps"} <= moved
    eps = result.model["extra.eps"]
    assert (eps < 1.0).any()          # dL/deps > 0: SGD shrinks the margin, as the spec notes
    fed.run_round(0)
    assert torch.equal(fed.method.receive(fed.context(fed.task(fed.clients[0], 1)))["local"]["extra.eps"],
                       fed.clients[0].model["extra.eps"])


def test_fedprp_predicts_by_prototypes_and_falls_back():
    method = FedPRP()
    z = torch.tensor([[0.0, 0.1], [2.0, 2.1]])
    out = Out(z, torch.tensor([[0.0, 1.0], [1.0, 0.0]]))

    class Ctx:
        client_id, state = 3, {}
        received = {"protos": None, "present": None}
        model = {}
    ctx = Ctx()
    assert method.predict(out, ctx).tolist() == [1, 0]                 # no prototypes anywhere: classifier
    ctx.received = {"protos": torch.tensor([[5.0, 5.0], [2.0, 2.0]]), "present": torch.tensor([True, True])}
    assert method.predict(out, ctx).tolist() == [1, 1]                 # no own prototypes: global ones
    ctx.state = {"protos": torch.tensor([[0.0, 0.0], [9.0, 9.0]]), "counts": torch.tensor([4, 0])}
    assert method.predict(out, ctx).tolist() == [0, 1]                 # own class 0, global for class 1 (padding)
    assert method.predict(out, ctx, "restricted").tolist() == [0, 0]   # only the client's classes
    assert method.predict(out, ctx, "logits").tolist() == [1, 0]


def test_fedprp_learns_above_chance_with_every_variant_recorded():
    record = run(make_config(method="fedprp", hyper={"head_epochs": 1, "body_epochs": 2},
                             metrics=["fedprp", "class_groups"], eval_personal_global=True, **DIGITS),
                 cache_dir=None, progress=False)
    final = record["final"]
    assert final["a_sel"] > 0.5 and final["a_glo"] > 0.12   # chance is 0.1 on the balanced test set
    assert {"personal_local_acc@logits", "personal_local_acc@restricted", "global_many", "global_few"} <= set(final)


# ---------------------------------------------------------------------- APFL
def test_apfl_loss_gives_the_papers_three_updates():
    torch.manual_seed(0)
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    w = {"head.weight": torch.randn(2, 3, requires_grad=True)}
    v = torch.randn(2, 3, requires_grad=True)
    alpha = torch.tensor(0.3, requires_grad=True)
    f = lambda W: F.cross_entropy(x @ W.T, y)  # noqa: E731
    params = {**w, V + "head.weight": v, ALPHA: alpha}
    loss = f(w["head.weight"]) + f(mixed(alpha, params, w)["head.weight"])
    gw, gv, ga = torch.autograd.grad(loss, [w["head.weight"], v, alpha])
    vbar = (alpha * v + (1 - alpha) * w["head.weight"]).detach().requires_grad_(True)
    g_bar = torch.autograd.grad(f(vbar), vbar)[0]
    g_w = torch.autograd.grad(f(w["head.weight"]), w["head.weight"])[0]
    assert torch.allclose(gw, g_w)                                    # w <- w - eta grad f(w)
    assert torch.allclose(gv, alpha * g_bar)                          # v <- v - eta grad_v f(v_bar)
    assert torch.isclose(ga, ((v - w["head.weight"]) * g_bar).sum())  # alpha <- alpha - eta <v - w, grad f(v_bar)>


def test_apfl_alpha_steps_are_projected_onto_the_unit_interval():
    """alpha leaves [0, 1] only to be put back on its edge, where the next gradient still reaches it (clipping it
    inside the forward instead froze an alpha that had crossed 0: APFL became FedAvg)."""
    phase = APFL().local_phases(None)[0]
    projected = phase.project({ALPHA: torch.tensor(-0.2), "head.weight": torch.tensor([-3.0, 4.0])})
    assert projected[ALPHA] == 0 and torch.equal(projected["head.weight"], torch.tensor([-3.0, 4.0]))
    assert phase.project({ALPHA: torch.tensor(1.3)})[ALPHA] == 1
    assert phase.project({ALPHA: torch.tensor(0.4)})[ALPHA] == torch.tensor(0.4)
    # at the edge alpha = 0 the gradient is <v - w, grad f(w)>, not 0
    torch.manual_seed(1)
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    w, v = {"head.weight": torch.randn(2, 3)}, torch.randn(2, 3)
    alpha = torch.tensor(0.0, requires_grad=True)
    loss = F.cross_entropy(x @ mixed(alpha, {V + "head.weight": v}, w)["head.weight"].T, y)
    (ga,) = torch.autograd.grad(loss, [alpha])
    W = w["head.weight"].clone().requires_grad_(True)
    (g_w,) = torch.autograd.grad(F.cross_entropy(x @ W.T, y), [W])
    assert torch.isclose(ga, ((v - w["head.weight"]) * g_w).sum()) and ga != 0


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_apfl_alpha_stays_in_the_unit_interval_in_every_executor(executor):
    """Started near 1 with a large rate, alpha runs into the edge; every executor stops it there."""
    fed = build(make_config(method="apfl", hyper={"alpha_init": 0.99}, executor=executor, **{**DIGITS, "lr": 0.2}))
    fed.run()
    alphas = [float(c.model[ALPHA]) for c in fed.clients]
    assert all(0 <= a <= 1 for a in alphas) and 1.0 in alphas, alphas


# ---------------------------------------------------------------------- FedRoD
def test_fedrod_balanced_softmax_and_personal_head_gradients():
    fed = build(make_config(method="fedrod", **DIGITS))
    ctx = fed.context(fed.task(fed.clients[0], 0))
    local = fed.method.receive(ctx)["local"]
    assert torch.equal(local[P_WEIGHT], torch.zeros_like(local["head.weight"]))
    z = torch.randn(4, local["head.weight"].shape[1], requires_grad=True)
    params = {
        k: (v.clone().requires_grad_(True) if k in ("head.weight", P_WEIGHT, P_BIAS) else v) for k, v in local.items()
    }
    logits = F.linear(z, params["head.weight"], params["head.bias"])
    y = torch.tensor([0, 1, 2, 2])
    loss = fed.method.local_loss(Out(z, logits), Batch(None, y), params, ctx)
    prior = ctx.counts / ctx.counts.sum()
    expected = F.cross_entropy(logits + torch.log(prior.clamp_min(1e-8)), y) + F.cross_entropy(logits, y)  # P = 0
    assert torch.isclose(loss, expected)
    # the personal term reaches only the personal head
    personal = fed.method.local_loss(Out(z, logits), Batch(None, y), params, ctx) - \
        F.cross_entropy(logits + torch.log(prior.clamp_min(1e-8)), y)
    g_head, g_p, g_z = torch.autograd.grad(personal, [params["head.weight"], params[P_WEIGHT], z])
    assert g_head.abs().sum() == 0 and g_z.abs().sum() == 0 and g_p.abs().sum() > 0


# ---------------------------------------------------------------------- FedPHP
def test_fedphp_moving_average_with_growing_mu_and_kd_by_hand():
    fed = build(make_config(method="fedphp", hyper={"ramp": 4}, **DIGITS))
    from fedlib.engine.client import local_update
    task = fed.task(fed.clients[1], 0)
    hpm0 = {k: v.clone() for k, v in task.state["hpm"].items()}
    result = local_update(fed.method, task, fed.setup, fed.trainer)
    # first participation: mu = 0, the HPM becomes the local model
    assert all(torch.equal(result.state["hpm"][k], result.model[k]) for k in hpm0)
    task.state["participations"] = torch.tensor(2)                  # mu = 0.9 * 2 / 4 = 0.45
    before = {k: v.clone() for k, v in task.state["hpm"].items()}
    result = local_update(fed.method, fed.task(fed.clients[1], 1), fed.setup, fed.trainer)
    k = "head.bias"
    assert torch.allclose(result.state["hpm"][k], 0.45 * before[k] + 0.55 * result.model[k], atol=1e-6)
    # KD term: teacher softmax at T on the teacher only
    logits, teacher = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 4.0]])
    p = F.softmax(teacher / 4.0, 1)
    kd = -(p * F.log_softmax(logits, 1)).sum()
    assert math.isclose(float(kd), -(p[0, 0] * math.log(math.exp(1) / (math.exp(1) + 1))
                                     + p[0, 1] * math.log(1 / (math.exp(1) + 1))), rel_tol=1e-6)


# ---------------------------------------------------------------------- CReFF
def test_creff_class_gradients_equal_autograd_and_matching_distance():
    torch.manual_seed(1)
    z, y = torch.randn(7, 4), torch.tensor([0, 0, 2, 2, 2, 1, 0])
    W, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, requires_grad=True)
    gW, gb, has = class_gradients(z, y, W.detach(), b.detach(), 3)
    for c in range(3):
        loss = F.cross_entropy(z[y == c] @ W.T + b, y[y == c])
        aW, ab = torch.autograd.grad(loss, [W, b])
        assert torch.allclose(gW[c], aW, atol=1e-6) and torch.allclose(gb[c], ab, atol=1e-6)
    assert has.all()
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert math.isclose(float(gradient_distance(a, torch.tensor([[1.0, 0.0], [1.0, 0.0]]))), 1.0, abs_tol=1e-6)


def test_creff_server_step_reduces_the_gradient_distance_and_retrains_the_classifier():
    fed = build(make_config(method="creff", hyper={"match_epochs": 30, "crt_epochs": 2}, **DIGITS))
    head_before = {k: v.clone() for k, v in fed.server.state["syn_head"].items()}
    features_before = fed.server.state["features"].clone()
    fed.run_round(0)
    assert not torch.equal(fed.server.state["features"], features_before)
    assert not torch.equal(fed.server.state["syn_head"]["head.weight"], head_before["head.weight"])
    assert torch.equal(fed.method.global_params(fed.server)["head.weight"], fed.server.state["syn_head"]["head.weight"])
    assert not torch.equal(fed.method.broadcast(fed.server, 0)["params"]["head.weight"],
                           fed.server.state["syn_head"]["head.weight"])   # clients train from FedAvg's head


# ---------------------------------------------------------------------- FEDIC
def test_fedic_gated_ensemble_by_hand():
    K, d = 2, 3
    gate = {"scale": torch.zeros(K, 1), "bias": torch.zeros(1), "logit_scale": torch.tensor([2.0, 1.0]),
            "logit_bias": torch.tensor([0.0, 1.0]), "gate_w": torch.zeros(d, 1), "gate_b": torch.zeros(1)}
    logits = torch.tensor([[[1.0, 3.0]], [[3.0, 1.0]]])            # 2 clients, 1 sample
    feats = torch.zeros(2, 1, d)
    calibrated = torch.tensor([[0.0, 0.0]])
    # equal client weights (sigmoid(0) normalised): mean logits (2, 2); adjusted (4, 3); gate 0.5
    assert torch.allclose(gated_ensemble(gate, feats, logits, calibrated), torch.tensor([[2.0, 1.5]]))


def test_fedic_needs_a_server_set_and_changes_the_global_model():
    with pytest.raises(ConfigError, match="server"):
        build(make_config(method="fedic", **DIGITS))
    spec = {**DIGITS["partition"], "server": 10}
    cfg = make_config(method="fedic", hyper={"server_steps": 3, "distill_steps": 3}, **{**DIGITS, "partition": spec})
    record = run(cfg, cache_dir=None, progress=False)
    assert record["final"]["global_acc"] > 0.1


def test_the_beta_reading_follows_eq_8_and_the_records():
    """After R rounds a global prototype keeps beta^(R-1) of its first value (Eq. 8): at R = 5, beta = 0.9 keeps
    0.9^4 = 0.66 (a lag, named when A_glo falls with beta); at R = 50 it keeps 0.0057 (no lag to blame)."""
    from fedlib.studies import fedprp_pages

    def runs(rounds, values):
        return {beta: [{"seed": 0, "config": {"rounds": rounds}, "final": {},
                        "history": [{"round": rounds, "a_glo": v / 100}]}]
                for beta, v in zip((0.1, 0.5, 0.9), values)}

    lines = fedprp_pages.beta_reading(runs(5, [48.0, 35.0, 25.0]), "ci")
    assert lines[2] == "beta = 0.9: A_glo 25.00%; weight of the first round's prototypes after 5 rounds beta^4 = 0.66"
    assert "still hold 66% (beta = 0.9)" in lines[3] and "(beta = 0.5)" not in lines[3]   # 0.5^4 = 0.06
    lines = fedprp_pages.beta_reading(runs(50, [48.0, 35.0, 25.0]), "ci")
    assert "does not explain it" in lines[-1]
    assert len(fedprp_pages.beta_reading(runs(5, [25.0, 35.0, 48.0]), "ci")) == 3   # A_glo rises: nothing to explain


def test_a_papers_participation_is_registered_where_the_paper_is_and_resolved_from_the_config():
    """No paper branch in the experiment layer: FedPRP's module registers its late-joining clients with their two
    fields, a config selects them with late_clients > 0 (keys unchanged: the same flat fields, left out of the key
    at their defaults) and the registry refuses bad values in one line."""
    from fedlib.engine.protocol import PARTICIPATIONS, UniformParticipation
    from fedlib.errors import ConfigError
    from fedlib.experiment import make_config, validate
    from fedlib.methods.fedprp import LateClients

    assert {"uniform", "late_clients"} <= set(PARTICIPATIONS)
    plain = make_config(method="fedavg", dataset="digits", num_clients=10, rounds=5, fraction=0.5)
    assert plain.participation.schedule() == UniformParticipation(0.5)
    late = make_config(method="fedavg", dataset="digits", num_clients=10, rounds=5, late_clients=3, late_round=4)
    assert late.participation.spec().name == "late_clients"
    assert late.participation.schedule() == LateClients(3, 4, 1.0)
    assert late.participation.schedule().clients(10, 0, 4) == [7, 8, 9]
    with pytest.raises(ConfigError, match="late_round"):
        validate(make_config(method="fedavg", dataset="digits", num_clients=10, rounds=5, late_clients=3,
                             late_round=9))
    # the fields are FedPRP's, not the generic config's: a plain config holds none, and names them only flat
    import dataclasses

    from fedlib.experiment.config import ParticipationConfig

    assert [f.name for f in dataclasses.fields(ParticipationConfig)] == ["fraction", "own"]
    assert plain.participation.own == {}
    assert plain.flat()["late_clients"] == 0 and make_config(**plain.flat()) == plain
    assert make_config(method="fedavg", late_clients=0).key() == make_config(method="fedavg").key()
    with pytest.raises(ConfigError, match="late_round"):
        validate(make_config(method="fedavg", dataset="digits", num_clients=10, rounds=5, late_round="soon"))


def test_fedic_client_weights_stay_finite_where_every_sigmoid_underflows():
    """sigmoid(a_k) / sum_j sigmoid(a_j) with every a_k below -110 is 0 / 0 in float32 (a FedPRP reference run's
    server turned NaN in round 10); the log-space form gives the same weights where the division is fine and
    finite ones (the softmax of a_k, the limit) where it is not."""
    K, d = 3, 2
    gate = {"scale": torch.ones(K, 1), "bias": torch.zeros(1), "logit_scale": torch.ones(K),
            "logit_bias": torch.zeros(K), "gate_w": torch.zeros(d, 1), "gate_b": torch.full((1,), 50.0)}  # carry = 1
    feats = torch.zeros(2, 1, d)
    moderate = torch.tensor([[[1.0, -2.0, 0.5]], [[0.0, 1.0, -1.0]]])      # a = -0.5, 0.0
    a = moderate.sum(-1)
    w = torch.sigmoid(a) / torch.sigmoid(a).sum(0)
    expected = (w.unsqueeze(-1) * moderate).sum(0)
    assert torch.allclose(gated_ensemble(gate, feats, moderate, torch.zeros(1, K)), expected, atol=1e-6)
    extreme = torch.tensor([[[-40.0, -40.0, -40.0]], [[-45.0, -45.0, -45.0]]])   # a = -120, -135
    assert float(torch.sigmoid(extreme.sum(-1)).sum()) == 0.0                     # the old division: 0 / 0
    out = gated_ensemble(gate, feats, extreme, torch.zeros(1, K))
    weights = torch.softmax(extreme.sum(-1), 0)                                    # e^15 : 1
    assert torch.isfinite(out).all() and torch.allclose(out, (weights.unsqueeze(-1) * extreme).sum(0))
