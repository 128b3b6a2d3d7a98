"""pFedCSPC (Eq. 4-18) and the baselines of its chapter, each distinctive step against independent
numbers: brute-force loops, numpy / scikit-learn statistics, hand-computed aggregates."""
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedlib.engine.core import Batch, Out
from fedlib.errors import ConfigError
from fedlib.experiment import make_config, run
from fedlib.losses import angle_alignment, edge_alignment, prototype_infonce, weighted_supcon
from fedlib.methods import make_method
from fedlib.methods.ccvr import client_class_statistics, pooled_statistics
from fedlib.methods.fedala import adaptive_weights
from fedlib.methods.fedasam import asam_perturbation
from fedlib.methods.feddecorr import decorrelation
from fedlib.methods.fedetf import balanced_softmax, simplex_etf
from fedlib.methods.fedfomo import fomo_weights
from fedlib.methods.fedntd import not_true_distillation
from fedlib.methods.fedproc import prototype_contrast
from fedlib.methods.grace import consistency_weights, coral
from fedlib.prototypes import clustered_prototypes, in_client_augmentation, mean_over_holders

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 0.5, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05, metrics=["generalization"])
gen = torch.Generator()


@pytest.fixture(autouse=True)
def fresh_generator():
    gen.manual_seed(0)       # every test draws the same numbers whatever ran before


def randn(*shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# ---------------------------------------------------------------------- pFedCSPC losses (Eq. 5-7, 12)
def test_eq5_is_cross_entropy_on_cosine_logits_and_skips_classes_without_prototypes():
    f, protos = randn(6, 4), randn(3, 4)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    cos = F.normalize(f, dim=1) @ F.normalize(protos, dim=1).T
    expected = F.cross_entropy(cos / 0.5, y)
    assert torch.isclose(prototype_infonce(f, Batch(f, y), protos, torch.ones(3, dtype=torch.bool), 0.5), expected)
    present = torch.tensor([True, True, False])
    keep = y != 2
    expected = F.cross_entropy((cos / 0.5)[keep][:, :2], y[keep])
    assert torch.isclose(prototype_infonce(f, Batch(f, y), protos, present, 0.5), expected)


def _angle(a, b, c):
    u, v = a - b, c - b
    return float(u @ v / (u.norm() * v.norm()))


def test_eq6_and_eq7_against_loops_over_triplets_and_pairs():
    f, protos = randn(5, 3), randn(4, 3)
    y = torch.tensor([0, 1, 2, 3, 1])
    batch = Batch(f, y)
    gaps = [abs(_angle(f[a], f[b], f[c]) - _angle(protos[y[a]], protos[y[b]], protos[y[c]]))
            for a, b, c in itertools.permutations(range(5), 3) if len({int(y[a]), int(y[b]), int(y[c])}) == 3]
    assert math.isclose(float(angle_alignment(f, batch, protos, None)), np.mean(gaps), rel_tol=1e-9)
    edges = [abs(float((f[a] - f[b]).norm() - (protos[y[a]] - protos[y[b]]).norm()))
             for a, b in itertools.permutations(range(5), 2)]
    assert math.isclose(float(edge_alignment(f, batch, protos, None)), np.mean(edges), rel_tol=1e-6)


def _supcon_loop(z, y, source, tau, hard, easy):
    z = F.normalize(z, dim=1)
    losses = []
    for a in range(len(y)):
        positives = [p for p in range(len(y)) if p != a and y[p] == y[a]]
        if not positives:
            continue
        sigma = [hard if (y[b] == y[a]) != (source[b] == source[a]) else easy for b in range(len(y))]
        denom = sum(sigma[b] * math.exp(float(z[a] @ z[b]) / tau) for b in range(len(y)) if b != a)
        losses.append(np.mean([-math.log(sigma[p] * math.exp(float(z[a] @ z[p]) / tau) / denom) for p in positives]))
    return np.mean(losses)


@pytest.mark.parametrize("hard,easy", [(1.0, 1.0), (1.0, 0.5)])
def test_eq12_weighted_supcon_against_a_loop(hard, easy):
    z = randn(7, 3)
    y = torch.tensor([0, 0, 1, 1, 2, 0, 1])
    source = torch.tensor([0, 1, 0, 1, 0, 0, 1])
    got = float(weighted_supcon(z, y, source, 0.5, hard, easy))
    assert math.isclose(got, _supcon_loop(z, y, source, 0.5, hard, easy), rel_tol=1e-9)


# ---------------------------------------------------------------------- prototypes (Eq. 8-10, 14, 16)
def test_eq8_9_one_cluster_full_share_gives_class_means_and_kmeans_is_seeded():
    h = randn(40, 3).float()
    y = torch.arange(40) % 3
    protos, labels = clustered_prototypes(h, y, 4, 1, 1, 1.0, seed=5)
    assert labels.tolist() == [0, 1, 2]
    for c in range(3):
        assert torch.allclose(protos[c], h[y == c].mean(0), atol=1e-6)
    a = clustered_prototypes(h, y, 4, 2, 5, 0.8, seed=5)
    b = clustered_prototypes(h, y, 4, 2, 5, 0.8, seed=5)
    assert torch.equal(a[0], b[0]) and len(a[1]) == 3 * 2 * 5
    assert torch.equal(torch.bincount(a[1]), torch.tensor([10, 10, 10]))


def test_eq8_clusters_separate_two_modes_of_a_class():
    h = torch.cat([torch.zeros(10, 2), torch.full((10, 2), 10.0)]) + 0.01 * randn(20, 2).float()
    protos, _ = clustered_prototypes(h, torch.zeros(20, dtype=torch.long), 1, 2, 1, 1.0, seed=0)
    assert sorted(round(float(p[0])) for p in protos) == [0, 10]


def test_eq10_partners_come_from_the_same_client_and_class_negatives_from_another_class():
    U = randn(8, 2)
    labels = torch.tensor([0, 0, 1, 1, 0, 0, 1, 2])
    source = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    pos, neg, valid = in_client_augmentation(U, labels, source, 4, (0.5,), torch.Generator().manual_seed(1))
    assert valid.all()
    for i, j in itertools.product(range(8), range(4)):
        partner = U[i] - (pos[i, j] - U[i]) / 0.5          # u+ = u1 + lam (u1 - u2)
        other = U[i] + (neg[i, j] - U[i]) / 0.5            # u- = u1 + lam (u3 - u1)
        p = int(((U - partner) ** 2).sum(1).argmin())
        o = int(((U - other) ** 2).sum(1).argmin())
        assert source[p] == source[i] and labels[p] == labels[i]
        assert source[o] == source[i] and labels[o] != labels[i]
        if int(((labels == labels[i]) & (source == source[i])).sum()) > 1:
            assert p != i


def test_eq14_16_mean_over_holders_by_hand():
    values = torch.tensor([[0.0], [2.0], [10.0], [4.0]])
    labels = torch.tensor([0, 0, 0, 1])
    source = torch.tensor([0, 0, 1, 1])
    means, present = mean_over_holders(values, labels, source, 3)
    # class 0: client 0's mean 1, client 1's 10 -> 5.5 (not the pooled 4); class 1: 4; class 2: nobody
    assert means[:, 0].tolist() == [5.5, 4.0, 0.0] and present.tolist() == [True, True, False]


# ---------------------------------------------------------------------- pFedCSPC method
def test_server_schedule_follows_fedcspc_code():
    m = make_method("pfedcspc")
    assert [m.server_lr(t, 0) for t in (1, 5, 6, 40, 41)] == [0.1, 0.1, 0.01, 0.01, 0.001]
    assert math.isclose(m.server_lr(1, 30), 0.01) and math.isclose(m.server_lr(1, 60), 0.001)


def test_knowledge_prediction_mixes_softmaxes():
    m = make_method("pfedcspc", lam_kp=1.0)
    exemplars = torch.eye(3)
    out = Out(z=torch.tensor([[0.1, 0.9, 0.0]]), logits=torch.tensor([[5.0, 0.0, 0.0]]))
    received = {"exemplars": exemplars, "exemplar_mask": torch.ones(3, dtype=torch.bool)}

    class Ctx:
        client_id = None

    ctx = Ctx()
    ctx.received = received
    assert m.predict(out, ctx).tolist() == [1]                # the exemplar side only
    assert m.predict(out, ctx, "net").tolist() == [0]         # the network alone
    m0 = make_method("pfedcspc", lam_kp=0.0)
    assert m0.predict(out, ctx).tolist() == [0]


def test_pfedcspc_with_every_component_off_is_fedavg():
    off = dict(calibrate=False, augment=False, align=False, kp=False, pmi=False)
    a = run(make_config(method="fedavg", **DIGITS), cache_dir=None, progress=False)
    b = run(make_config(method="pfedcspc", hyper=off, **DIGITS), cache_dir=None, progress=False)
    for ra, rb in zip(a["history"], b["history"]):
        assert ra["train_loss"] == rb["train_loss"]
        assert ra["acc_global"] == rb["acc_global"]


def test_pfedcspc_round_personalises_by_eq4_and_learns():
    rec = run(make_config(method="pfedcspc", hyper={"server_epochs": 5}, model="mlp",
                          **{**DIGITS, "rounds": 3, "local_epochs": 2}), cache_dir=None, progress=False)
    W = np.asarray(rec["history"][-1]["weights"]["pmi"])
    losses = np.asarray(rec["history"][-1]["weights"]["pmi_losses"])
    assert W.shape == (4, 4) and np.allclose(W.sum(1), 1.0, atol=1e-4)
    expected = np.exp(-losses) / np.exp(-losses).sum(1, keepdims=True)     # tau_p = 1
    assert np.allclose(W, expected, atol=1e-4)
    final = rec["final"]
    assert final["acc_global"] > 0.3 and final["i_local"] > 0.3
    assert "global_global_acc@net" in final


def test_pfedcspc_configuration_errors_say_what_is_allowed():
    with pytest.raises(ConfigError, match="cpm"):
        make_method("pfedcspc", prototypes="kmeans")
    with pytest.raises(ConfigError, match="fedavg, fedprox, moon, fedasam"):
        make_method("pfedcspc", base="scaffold")


@pytest.mark.parametrize("base", ["fedprox", "moon", "fedasam"])
def test_pfedcspc_runs_on_each_base_objective(base):
    rec = run(make_config(method="pfedcspc", hyper={"base": base, "server_epochs": 2}, model="mlp", **DIGITS),
              cache_dir=None, progress=False)
    assert np.isfinite(rec["final"]["hm"])


# ---------------------------------------------------------------------- baselines
def test_fedntd_distils_only_not_true_classes():
    s, t = randn(3, 4), randn(3, 4)
    y = torch.tensor([0, 2, 3])
    expected = 0.0
    for i in range(3):
        keep = [c for c in range(4) if c != y[i]]
        p_t = torch.softmax(t[i, keep] / 2.0, 0)
        p_s = torch.softmax(s[i, keep] / 2.0, 0)
        expected += float((p_t * (p_t.log() - p_s.log())).sum()) / 3
    assert math.isclose(float(not_true_distillation(s, t, Batch(s, y), 2.0)), 4 * expected, rel_tol=1e-9)


def test_feddecorr_uses_the_correlation_matrix():
    z = randn(20, 5)
    K = np.corrcoef(z.numpy(), rowvar=False)
    assert math.isclose(float(decorrelation(z, Batch(z, None))), (K ** 2).sum() / 25, rel_tol=1e-6)


def test_fedproc_prototype_contrast_and_alpha_schedule():
    z, protos = randn(4, 3), randn(2, 3)
    y = torch.tensor([0, 1, 1, 0])
    expected = F.cross_entropy(z @ F.normalize(protos, dim=1).T, y)
    assert torch.isclose(prototype_contrast(z, Batch(z, y), protos, torch.ones(2, dtype=torch.bool)), expected)
    m = make_method("fedproc")

    class Ctx:
        rounds = 10

    out = Out(z=z, logits=randn(4, 2))
    for t in (0, 4):
        ctx = Ctx()
        ctx.round = t
        ctx.received = {"protos": protos, "present": torch.ones(2, dtype=torch.bool)}
        ce = F.cross_entropy(out.logits, y)
        want = ce if t == 0 else 0.4 * ce + 0.6 * expected
        assert torch.isclose(m.local_loss(out, Batch(z, y), {}, ctx), want)


def test_feddc_drift_accumulates_updates_and_uploads_the_corrected_model():
    from fedlib.engine.core import LocalResult

    m = make_method("feddc")
    state = {}
    m.init_client(state, {"body.w": torch.zeros(2)})

    class Ctx:
        lr, size = 0.5, 10

    ctx = Ctx()
    ctx.state = state
    ctx.received = {"params": {"body.w": torch.tensor([1.0, 1.0])}}
    up = m.upload(ctx, {"local": {"body.w": torch.tensor([2.0, 0.0])}}, LocalResult(steps=4, loss=0.0))
    assert state["drift"]["body.w"].tolist() == [1.0, -1.0]                  # h = 0 + (theta - w)
    assert up["params"]["body.w"].tolist() == [3.0, -1.0]                   # theta + h
    assert state["correction"]["body.w"].tolist() == [0.5, -0.5]            # (theta - w) / (lr K)


def test_fedasam_perturbation_has_adaptive_norm_rho():
    params = {"a.weight": randn(3, 2), "a.bias": randn(2)}
    grads = [randn(3, 2), randn(2)]
    eps = asam_perturbation(params, grads, rho=0.5, eta=0.01)
    T = [params["a.weight"].abs() + 0.01, torch.ones(2)]
    # ||T^-1 eps|| = rho, and eps is along T^2 g
    assert math.isclose(float(torch.sqrt(sum(((e / t) ** 2).sum() for e, t in zip(eps, T)))), 0.5, rel_tol=1e-9)
    assert torch.allclose(eps[1] / grads[1], (eps[1] / grads[1])[0].expand(2))


def test_ccvr_pooled_statistics_equal_those_of_the_pooled_data():
    z = randn(60, 3)
    y = torch.arange(60) % 2
    owner = torch.arange(60) // 20
    stats = [client_class_statistics(z[owner == k], y[owner == k], 2) for k in range(3)]
    total, mu, sigma = pooled_statistics(*(torch.stack([s[i] for s in stats]) for i in range(3)))
    for c in range(2):
        pooled = z[y == c].numpy()
        assert int(total[c]) == len(pooled)
        assert np.allclose(mu[c].numpy(), pooled.mean(0))
        assert np.allclose(sigma[c].numpy(), np.cov(pooled, rowvar=False))


def test_fedala_weights_stay_in_the_unit_box():
    z = randn(30, 4).float()
    y = torch.arange(30) % 3
    local = {"head.weight": randn(3, 4).float(), "head.bias": torch.zeros(3)}
    glob = {"head.weight": randn(3, 4).float(), "head.bias": torch.ones(3)}
    ones = {k: torch.ones_like(v) for k, v in local.items()}
    w, epochs = adaptive_weights(z, y, local, glob, ones, 10.0, 8, True, 1e-9, 3, 7)
    assert epochs == 7 and all(((v >= 0) & (v <= 1)).all() for v in w.values())
    assert any((v < 1).any() for v in w.values())


def test_fedfomo_weights_by_hand():
    w = fomo_weights(1.0, [0.5, 1.5, 0.8], [2.0, 1.0, 0.1])
    raw = np.array([0.5 / 2.0, 0.0, 0.2 / 0.1])
    assert np.allclose(w, raw / raw.sum())
    assert fomo_weights(1.0, [2.0], [1.0]).sum() == 0


def test_fedsoup_and_fedfomo_hold_out_validation_and_run():
    for name in ("fedsoup", "fedfomo"):
        rec = run(make_config(method=name, model="mlp", **DIGITS), cache_dir=None, progress=False)
        assert rec["final"]["i_local"] > 0.2


def test_grace_weights_follow_sizes_for_agreeing_updates_and_coral_by_hand():
    u = randn(5)
    assert np.allclose(consistency_weights([u, 2 * u, 3 * u], [1, 1, 2]), [0.25, 0.25, 0.5])
    w = consistency_weights([u, u, -u], [1, 1, 1])
    assert w[2] < w[0]
    a, b = randn(10, 3), randn(10, 3)
    expected = ((np.cov(a.numpy(), rowvar=False) - np.cov(b.numpy(), rowvar=False)) ** 2).sum() / 36
    assert math.isclose(float(coral(a, b, Batch(a, None))), expected, rel_tol=1e-9)


def test_fedetf_classifier_is_a_simplex_etf_and_the_loss_is_balanced_softmax():
    M = simplex_etf(10, 32, seed=3)
    G = (M.T @ M).double()
    assert torch.allclose(G.diagonal(), torch.ones(10, dtype=torch.float64), atol=1e-5)
    off = G[~torch.eye(10, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, -1 / 9), atol=1e-5)
    assert torch.allclose(M.sum(1), torch.zeros(32), atol=1e-5)             # centred
    assert torch.equal(M, simplex_etf(10, 32, seed=3))
    M9 = simplex_etf(10, 9, seed=0)                                          # d = K - 1 is enough
    assert torch.allclose((M9.T @ M9).diagonal(), torch.ones(10), atol=1e-5)
    with pytest.raises(ConfigError, match="K - 1"):
        simplex_etf(10, 8, seed=0)
    logits = randn(3, 3)
    y = torch.tensor([0, 2, 2])
    counts = torch.tensor([5, 0, 20])
    expected = np.mean([-math.log(float(counts[y[i]]) * math.exp(logits[i, y[i]])
                                  / sum(float(counts[c]) * math.exp(logits[i, c]) for c in range(3)))
                        for i in range(3)])
    assert math.isclose(float(balanced_softmax(logits, Batch(logits, y), counts)), expected, rel_tol=1e-9)


def test_fedetf_adapts_per_client_and_beats_chance():
    rec = run(make_config(method="fedetf", model="mlp", hyper={"finetune_rounds": 2}, **{**DIGITS, "rounds": 3}),
              cache_dir=None, progress=False)
    assert rec["final"]["acc_global"] > 0.3 and rec["final"]["i_local"] > rec["final"]["acc_global"] - 0.1


def test_fedperpp_adds_a_proximal_term_on_shared_layers_only():
    m = make_method("fedperpp", mu=2.0)
    params = {"body.w": torch.tensor([1.0, 2.0]), "head.w": torch.tensor([5.0])}

    class Ctx:
        received = {"params": {"body.w": torch.tensor([0.0, 0.0])}}

    logits = torch.zeros(1, 2)
    y = torch.tensor([0])
    loss = m.local_loss(Out(z=logits, logits=logits), Batch(logits, y), params, Ctx())
    assert math.isclose(float(loss), math.log(2) + 0.5 * 2.0 * 5.0, rel_tol=1e-6)


def test_fedetfs_local_is_read_with_the_adaptation_its_evaluation_runs():
    """FedETF's Local comes after finetune_rounds x (3 + 3) epochs of local adaptation (the official code's
    evaluation); the note says so beside its lead over the best fine-tuned global method, from the records."""
    from fedlib.studies import pfedcspc, pfedcspc_pages

    def recs(local, glob, hyper=None):
        row = {"round": 2, "i_local": local / 100, "acc_global": glob / 100}
        return [{"seed": 0, "history": [row], "final": row, "config": {"hyper": hyper or {}}}]

    ds = pfedcspc.SCALES["ci"].datasets[0]
    table = {ds: {m: recs(50.0 + i, 40.0) for i, m in enumerate(pfedcspc.GLOBAL_METHODS)}}
    table[ds]["fedetf"] = recs(77.0, 41.0, {"finetune_rounds": 20})
    note = pfedcspc_pages.fedetf_note(table, "ci")
    assert note.startswith("FedETF's Local (77.00) reads each client's model after 120 epochs on its own data: 20 "
                           "alternations of 3 on the ETF classifier")
    assert "(the best of them, CCVR, 57.00)" in note and "lead of +20.00 points" in note and "41.00 against" in note
