"""Feature-shift domains, frozen backbones with their feature cache, and the FedPCL-family methods."""
import numpy as np
import pytest
import torch

from fedlib.backbones import extract, featurize
from fedlib.data import federate, load_dataset
from fedlib.data.partition import domains
from fedlib.errors import ConfigError
from fedlib.experiment import make_config, run, validate


@pytest.fixture(scope="module")
def digit4():
    return load_dataset("digit4", n_train=40, n_test=20)


def test_digit4_has_four_balanced_domains(digit4):
    assert digit4.train_x.shape == (160, 3, 32, 32) and digit4.test_x.shape == (80, 3, 32, 32)
    assert digit4.train_domain.bincount().tolist() == [40] * 4
    for d in range(4):
        assert digit4.train_y[digit4.train_domain == d].bincount(minlength=10).tolist() == [4] * 10
    assert 0.0 <= float(digit4.train_x.min()) and float(digit4.train_x.max()) <= 1.0
    # the MNIST-M-style images are coloured, the MNIST ones are grey
    mnist, mnistm = digit4.train_x[digit4.train_domain == 0], digit4.train_x[digit4.train_domain == 2]
    assert torch.allclose(mnist[:, 0], mnist[:, 1]) and not torch.allclose(mnistm[:, 0], mnistm[:, 1])


def test_digit4_is_deterministic():
    a = load_dataset("digit4", n_train=20, n_test=10, seed=3)
    from fedlib.data.domains import digit_domains

    b = digit_domains.__wrapped__(n_train=20, n_test=10, seed=3)  # bypass the in-process cache
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)


def test_domains_partition_one_domain_per_client_and_dirichlet_inside():
    labels = np.tile(np.arange(10), 40)
    dom = np.repeat(np.arange(4), 100)
    parts = domains(labels, 8, np.random.default_rng(0), dom, alpha=1.0)
    assert len(parts) == 8
    assert all(len(np.unique(dom[p])) == 1 for p in parts)
    assert [int(np.unique(dom[p])[0]) for p in parts] == [0, 0, 1, 1, 2, 2, 3, 3]
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat)) == 400
    with pytest.raises(ConfigError, match="multiple of the number of domains"):
        domains(labels, 6, np.random.default_rng(0), dom)


def test_single_domain_clients_are_tested_on_their_domain(digit4):
    fed = federate(digit4, 4, {"name": "domains", "test_fraction": 0.5}, 0)
    assert fed.client_domains == [0, 1, 2, 3]
    for i, idx in enumerate(fed.test_idx):
        assert (digit4.test_domain[idx] == i).all()


def test_backbone_features_are_cached_and_concatenated(digit4, tmp_path):
    f1 = extract("cnn_usps", digit4.train_x, tmp_path)
    assert f1.shape == (160, 128)
    cached = list((tmp_path / "features").glob("cnn_usps-*.pt"))
    assert len(cached) == 1
    assert torch.equal(extract("cnn_usps", digit4.train_x, tmp_path), f1)
    feats = featurize(digit4, ["cnn_usps", "cnn_mnist"], tmp_path)
    assert feats.train_x.shape == (160, 256) and torch.equal(feats.train_x[:, :128], f1)
    assert torch.equal(feats.train_domain, digit4.train_domain)


def test_unknown_backbone_is_a_config_error():
    with pytest.raises(ConfigError, match="backbones"):
        validate(make_config(dataset="digit4", backbones=["resnet_hub"], partition={"name": "domains"}, num_clients=4))


@pytest.mark.parametrize("method, hyper", [("fedpcl", {}), ("fedpcl", {"use_global": False}),
                                           ("fedpcl", {"loss": "supcon"}), ("fedpcl", {"loss": "ce_protodist"}),
                                           ("fedpcl", {"noise": 0.1}), ("fedpcl", {"loss": "pcl_official"}),
                                           ("fedpcl", {"loss": "pcl_infonce"}), ("pfedme", {}), ("perfedavg", {})])
def test_methods_on_frozen_features_learn(method, hyper):
    cfg = make_config(method=method, hyper=hyper, dataset="digit4", data_options={"n_train": 40, "n_test": 20},
                      backbones=["cnn_usps", "cnn_mnist"], partition={"name": "domains"}, num_clients=4, rounds=6,
                      local_epochs=2, batch_size=16, lr=1e-2 if method != "fedpcl" else 1e-3, optimizer="adam")
    record = run(cfg, cache_dir=None, progress=False)
    assert record["final"]["personal_local_acc"] > 0.3  # chance: 0.1
    if method == "fedpcl":
        assert record["final"]["uploaded_per_client"] == 10 * 256  # K prototypes of 256 numbers, nothing else


def test_fedpcl_official_reading_trains_nothing_in_round_one_and_predicts_by_its_own_prototypes(digit4):
    """The official code: no prototypes before the first aggregation, so round 1 leaves the projection as it was;
    global prototypes are the plain mean over the clients that hold a class; prediction is the nearest (squared
    distance) of the client's own prototypes, never a class it lacks."""
    import torch

    from fedlib.experiment import build

    cfg = make_config(method="fedpcl", hyper={"loss": "pcl_official"}, dataset="digit4",
                      data_options={"n_train": 40, "n_test": 20}, backbones=["cnn_usps", "cnn_mnist"],
                      partition={"name": "domains"}, num_clients=4, rounds=2, local_epochs=1, batch_size=16, lr=1e-2)
    fed = build(cfg, progress=False)
    before = {k: v.clone() for k, v in fed.clients[0].model.items()}
    fed.run_round(0)
    method, server = fed.method, fed.server
    assert server.state["local_sets"] is not None
    assert all(torch.equal(before[k], v) for k, v in fed.clients[0].model.items())   # round 1 trained nothing
    counts = torch.stack([torch.as_tensor(c.state["counts"]) for c in fed.clients])
    protos = torch.stack([c.state["protos"] for c in fed.clients])
    held = (counts > 0).float()
    plain_mean = (protos * held[..., None]).sum(0) / held.sum(0).clamp_min(1)[:, None]
    assert torch.allclose(server.state["protos"], plain_mean, atol=1e-6)
    z = torch.nn.functional.normalize(torch.randn(5, protos.shape[-1]), dim=1)
    ctx = fed.clients[0]
    out = type("Out", (), {"z": z, "logits": None})()
    predicted = method.predict(out, ctx)
    own = ctx.state["protos"]
    expected = ((z[:, None] - own[None]) ** 2).sum(2).masked_fill(ctx.state["counts"][None] == 0, 1e9).argmin(1)
    assert torch.equal(predicted, expected)


def test_projection_fc_is_one_linear_layer_on_the_unit_sphere_without_relu():
    import torch

    from fedlib.models import build_model

    model = build_model("projection_fc", (12,), 10)
    z = model.body(torch.randn(64, 12))
    assert torch.allclose(z.norm(dim=1), torch.ones(64), atol=1e-5)
    assert (z < 0).any()   # no ReLU before the normalisation: negative coordinates survive
    assert not any(isinstance(m, torch.nn.ReLU) for m in model.modules())


def test_the_official_baselines_classifier_gives_unit_norm_logits_in_0_1():
    """FedPCL's official code classifies its baselines with normalize(relu(fc z)): every logit in [0, 1], unit norm,
    so the smallest cross-entropy a sample can reach (one logit 1, the other K - 1 at 0) is log(e + 9) - 1 = 1.4611
    for K = 10."""
    import math

    import torch

    from fedlib.models import build_model

    torch.manual_seed(0)
    model = build_model("projection_official_head", (64,), 10)
    logits = model(torch.randn(32, 64))
    assert logits.min() >= 0 and logits.max() <= 1
    assert torch.allclose(logits.norm(dim=1)[logits.norm(dim=1) > 0], torch.tensor(1.0))
    best = torch.nn.functional.cross_entropy(torch.eye(10)[:1], torch.tensor([0]))
    assert float(best) == pytest.approx(math.log(math.e + 9) - 1, abs=1e-6) == pytest.approx(1.4611, abs=1e-4)
    assert [n for n, _ in model.named_parameters()] == ["body.1.weight", "body.1.bias", "head.0.weight", "head.0.bias"]
