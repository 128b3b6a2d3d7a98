"""FedPAC's readings of its authors' code as switches (statistics before local training, the head's own rate) and
the code's FMNIST CNN, each against numbers computed here."""
import numpy as np
import torch
import torch.nn.functional as F

from fedlib.experiment import build, make_config
from fedlib.methods.fedpac import collaboration_weights
from fedlib.models import build_model
from fedlib.prototypes import feature_variance

DIGITS = dict(dataset="digits", partition={"name": "shards", "s": 3, "imbalance": 0.5}, num_clients=4, rounds=1,
              local_epochs=1, batch_size=32, lr=0.05, seed=0)


def statistics_by_hand(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Counts, class means and per-class sums of squared norms, one class at a time."""
    counts = torch.stack([(y == k).sum() for k in range(num_classes)]).float()
    means = torch.stack([z[y == k].mean(0) if (y == k).any() else z.new_zeros(z.shape[1])
                         for k in range(num_classes)])
    sq = torch.stack([(z[y == k] ** 2).sum() for k in range(num_classes)])
    return counts, means, sq


def weights_from(fed, models: list[dict]) -> np.ndarray:
    """FedPAC's combination weights from the statistics of each client's model in ``models`` on its data."""
    stats = []
    for client, params in zip(fed.clients, models):
        ctx = fed.context(fed.task(client, 0))
        counts, means, sq = statistics_by_hand(ctx.features(params).z, ctx.labels, ctx.num_classes)
        stats.append((means, counts, feature_variance(counts, sq, means)))
    return collaboration_weights(*(torch.stack(column) for column in zip(*stats)))


def test_statistics_received_are_those_of_the_model_before_local_training():
    received = build(make_config(method="fedpac", hyper={"statistics": "received"}, **DIGITS))
    before = [dict(c.model) for c in received.clients]   # round 1: each client receives the initial model
    received.run()
    assert np.allclose(received.server.state["weights"]["beta"], weights_from(received, before), atol=1e-5)
    trained = build(make_config(method="fedpac", **DIGITS))
    trained.run()
    after = [received.clients[i].model for i in range(len(received.clients))]   # the same local training
    assert np.allclose(trained.server.state["weights"]["beta"], weights_from(trained, after), atol=1e-5)
    assert not np.allclose(trained.server.state["weights"]["beta"], received.server.state["weights"]["beta"],
                           atol=1e-3)


def test_head_rate_of_its_own_and_defaults_keep_the_record_keys():
    default = make_config(method="fedpac", **DIGITS)
    assert default.key() == make_config(method="fedpac", hyper={"statistics": "trained", "head_lr": None},
                                        **DIGITS).key()
    runs = {}
    for name, hyper in {"default": {}, "same": {"head_lr": DIGITS["lr"]}, "official": {"head_lr": 0.1}}.items():
        fed = build(make_config(method="fedpac", hyper=hyper, **DIGITS))
        fed.run()
        runs[name] = torch.cat([c.model["head.weight"].flatten() for c in fed.clients])
    assert torch.equal(runs["default"], runs["same"]) and not torch.allclose(runs["default"], runs["official"])


def test_the_official_fmnist_cnn_by_hand():
    torch.manual_seed(0)
    model = build_model("cnn_pac", (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) == 117_066   # conv 416 + 12,832, fc 102,528 + 1,290
    x = torch.randn(3, 1, 28, 28)
    conv1, conv2, fc1 = (m for m in model.body if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    h = F.max_pool2d(F.leaky_relu(F.conv2d(x, conv1.weight, conv1.bias)), 2)              # the code's order
    h = F.max_pool2d(F.leaky_relu(F.conv2d(h, conv2.weight, conv2.bias, padding=1)), 2)
    z = F.leaky_relu(F.linear(h.flatten(1), fc1.weight, fc1.bias))
    assert torch.allclose(model(x), F.linear(z, model.head.weight, model.head.bias), atol=1e-6)


def test_each_code_reading_says_the_parameter_counts_of_the_models_it_names():
    """The readings' descriptions (shown in FedGPA's chapter) name the two CNNs' sizes: they are the models' own."""
    from fedlib.methods.fedpac import CODE_READINGS

    says = CODE_READINGS["the code's CNN"].says
    for name in ("cnn_pac", "cnn2"):
        count = sum(p.numel() for p in build_model(name, (1, 28, 28), 10).parameters())
        assert f"{count:,}" in says, (name, count)
