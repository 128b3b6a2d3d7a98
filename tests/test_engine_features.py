"""Engine features the long-tail chapters need: trainable tensors outside the network, per-phase
weight decay, a server-side data split, late clients, participants-only and averaged-global
evaluation, prediction variants and own-class test splits."""
import copy

import numpy as np
import pytest
import torch
from test_executors import agreement_bound, max_difference

from fedlib.data.partition import class_counts, partition_with_server
from fedlib.engine.client import local_update
from fedlib.engine.core import Phase
from fedlib.engine.protocol import EvaluationPlan, LocalTraining, UniformParticipation
from fedlib.errors import ConfigError
from fedlib.experiment import build, make_config, run
from fedlib.losses import cross_entropy
from fedlib.methods import METHODS
from fedlib.methods.base import Method
from fedlib.methods.fedprp import LateClients, own_class_test_indices

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05)


class Margin(Method):
    """CE plus a learned per-class offset on the logits ("extra.offset"), trained only in phase 2."""
    name = "test_margin"
    personalized = True
    has_global_model = False
    shared = ("body", "projector")
    prediction_variants = ("shifted",)

    def receive(self, ctx):
        models = super().receive(ctx)
        models["local"].setdefault("extra.offset", torch.zeros(ctx.num_classes))
        return models

    def local_phases(self, ctx):
        return [Phase(trainable=("head",)), Phase(trainable=("body", "projector", "extra"), weight_decay=0.5)]

    def local_loss(self, out, batch, params, ctx):
        offset = params.get("extra.offset")
        logits = out.logits if offset is None else out.logits + offset
        return cross_entropy(logits, batch)

    def predict(self, out, ctx, variant=None):
        if variant == "shifted":
            return (out.logits + ctx.model.get("extra.offset", 0)).argmax(1)
        return out.logits.argmax(1)


@pytest.fixture
def margin_method(monkeypatch):
    monkeypatch.setitem(METHODS, "test_margin", Margin)
    return Margin


def test_extra_tensors_train_only_in_phases_that_list_them_and_stay_private(margin_method):
    fed = build(make_config(method="test_margin", **DIGITS))
    task = fed.task(fed.clients[0], 0)
    result = local_update(fed.method, task, fed.setup, fed.trainer)
    offset = result.model["extra.offset"]
    assert offset.abs().sum() > 0                          # trained in the second phase
    assert "extra.offset" not in result.upload["params"]   # never uploaded
    fed.run_round(0)
    assert "extra.offset" in fed.clients[0].model          # kept by the client for the next round
    start = fed.method.receive(fed.context(fed.task(fed.clients[0], 1)))["local"]["extra.offset"]
    assert torch.equal(start, fed.clients[0].model["extra.offset"])


def test_extra_tensors_batched_equal_sequential(margin_method):
    fed = build(make_config(method="test_margin", executor="batched", **DIGITS))
    tasks = [fed.task(c, 0) for c in fed.clients]
    batched = fed.executor.run(fed.method, copy.deepcopy(tasks))
    for task, b in zip(tasks, batched):
        a = local_update(fed.method, copy.deepcopy(task), fed.setup, fed.trainer)
        gap = max_difference(a.model, b.model)
        assert gap < 1e-5 or gap < agreement_bound(fed, task, a), gap   # rounding, or a discontinuity of training


def test_phase_weight_decay_overrides_the_experiment():
    w = torch.nn.Parameter(torch.ones(3))
    from fedlib.engine.training import OptimizerSpec, make_optimizer

    spec = OptimizerSpec("sgd", weight_decay=0.0).for_phase(Phase(weight_decay=0.5))
    opt = make_optimizer(spec, [w], lr=0.1)
    w.grad = torch.zeros(3)
    opt.step()
    assert torch.allclose(w.detach(), torch.full((3,), 0.95))   # w - lr * wd * w


def test_adam_steps_equal_the_per_tensor_loop_to_the_bit():
    """make_optimizer's Adam (foreach kernels) keeps the arithmetic of torch's per-tensor loop, which the committed
    FedPCL records were trained with."""
    from fedlib.engine.training import OptimizerSpec, make_optimizer

    torch.manual_seed(0)
    start = [torch.randn(64, 48), torch.randn(64)]
    grads = [[torch.randn_like(t) for t in start] for _ in range(5)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    loop = [torch.nn.Parameter(t.clone()) for t in start]
    opts = (make_optimizer(OptimizerSpec("adam", weight_decay=1e-4), ours, lr=1e-3),
            torch.optim.Adam(loop, lr=1e-3, weight_decay=1e-4, foreach=False))
    for step in grads:
        for params, opt in zip((ours, loop), opts):
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ours, loop))
    assert not torch.equal(ours[0], start[0])   # the steps moved the weights


def test_server_split_is_balanced_and_disjoint_from_clients():
    labels = np.repeat(np.arange(10), 100)
    parts, held = partition_with_server(labels, 10, 5, {"name": "iid", "server": 7, "imbalance": 0.5}, 0)
    assert np.bincount(labels[held], minlength=10).tolist() == [7] * 10
    flat = np.concatenate(parts)
    assert not set(flat) & set(held)
    totals = class_counts(labels, parts, 10).sum(0)
    assert totals[0] == 93 and totals[-1] == int(93 * 0.5)       # long tail over what the server left


def test_server_sees_its_data_and_a_functional_forward():
    fed = build(make_config(method="fedavg", **{**DIGITS, "partition": {"name": "iid", "server": 5}}))
    assert fed.server.data.x.shape[0] == 50 and fed.server.data.y.bincount().tolist() == [5] * 10
    out = fed.server.forward(fed.server.state["global"], fed.server.data.x)
    assert out.logits.shape == (50, 10)


def test_late_clients_join_at_their_round():
    assert LateClients(late=2, at_round=3).clients(10, 0, 0) == list(range(8))
    half = LateClients(late=2, at_round=3, fraction=0.5)
    assert half.clients(10, 0, 2) == UniformParticipation(0.5).clients(8, 0, 2)   # 4 of the first 8
    assert len(half.clients(10, 0, 2)) == 4 and all(i < 8 for i in half.clients(10, 0, 2))
    assert half.clients(10, 0, 3) == half.clients(10, 0, 9) == [8, 9]


def test_a_config_hands_the_engine_its_protocol_objects():
    cfg = make_config(method="fedavg", fraction=0.5, late_clients=1, late_round=1, eval_every=2, metrics=["fedprp"],
                      eval_clients="participants", **{**DIGITS, "rounds": 3})
    fed = build(cfg)
    assert fed.participation == LateClients(late=1, at_round=1, fraction=0.5)
    assert fed.evaluation == EvaluationPlan(every=2, metrics=("standard", "fedprp"), participants_only=True)
    assert fed.training == LocalTraining(DIGITS["local_epochs"], DIGITS["batch_size"], DIGITS["lr"])
    assert [fed.evaluation.due(t, 3) for t in range(3)] == [False, True, True]


def test_participants_only_and_averaged_global_evaluation():
    cfg = make_config(method="fedrep", fraction=0.5, eval_clients="participants", average_global=True,
                      metrics=["fedprp"], eval_personal_global=True, **DIGITS)
    record = run(cfg, cache_dir=None, progress=False)
    final = record["final"]
    assert len(record["final_confusions"]["personal_local"]) == 2          # the two clients of the last round
    assert "a_glo" in final and "global_acc" in final                     # FedRep has no global model of its own
    assert np.isclose(final["a_sel"], final["personal_local_acc"])


def test_prediction_variants_are_recorded(margin_method):
    record = run(make_config(method="test_margin", **DIGITS), cache_dir=None, progress=False)
    final = record["final"]
    assert "personal_local_acc@shifted" in final and 0 <= final["personal_local_acc@shifted"] <= 1
    assert "personal_local@shifted" in record["final_confusions"]


def test_own_class_test_split_covers_each_class_once_among_holders():
    test_labels = np.repeat(np.arange(3), 10)
    counts = np.array([[5, 0, 1], [3, 2, 0], [0, 0, 4]])
    parts = own_class_test_indices(test_labels, counts, 0)
    for i, part in enumerate(parts):
        assert set(test_labels[part]) <= set(np.flatnonzero(counts[i]))
    flat = np.concatenate(parts)
    assert len(flat) == len(set(flat)) == 30                  # every test image of a held class, once
    assert len(parts[1][test_labels[parts[1]] == 1]) == 10    # class 1 only at client 1


def test_per_class_cap_applies_before_the_long_tail():
    labels = np.repeat(np.arange(4), 50)
    parts, _ = partition_with_server(labels, 4, 2, {"name": "iid", "per_class": 20, "imbalance": 0.5}, 0)
    totals = class_counts(labels, parts, 4).sum(0)
    assert totals[0] == 20 and totals[-1] == 10 and list(totals) == sorted(totals, reverse=True)


def test_evaluation_fine_tuning_of_a_global_method_equals_fedavg_ft():
    plain = run(make_config(method="fedavg", eval_finetune_epochs=1, **DIGITS), cache_dir=None, progress=False)
    ft = run(make_config(method="fedavg_ft", hyper={"finetune_epochs": 1}, **DIGITS), cache_dir=None, progress=False)
    for key in ("global_acc", "personal_local_acc", "personal_local_i_local"):
        assert plain["final"][key] == ft["final"][key], key
    untuned = run(make_config(method="fedavg", **DIGITS), cache_dir=None, progress=False)
    assert untuned["final"]["global_acc"] == plain["final"]["global_acc"]


def test_forward_from_encoder_outputs_matches_the_full_forward():
    fed = build(make_config(method="fedavg", **DIGITS))
    params = fed.server.state["global"]
    x = fed.trainer.x[:20]
    full = fed.trainer.features(params, x)
    part = fed.server.forward_from(params, full.h)
    assert full.h is not None and full.h.shape[0] == 20
    torch.testing.assert_close(part.z, full.z, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(part.logits, full.logits, rtol=1e-5, atol=1e-6)


def test_trained_keeps_the_final_federation_in_the_cache_and_loads_it_without_training(tmp_path, monkeypatch):
    from fedlib.experiment import trained
    from fedlib.methods.fedavg import FedAvg

    cfg = make_config(**{**DIGITS, "rounds": 2}, method="fedavg")
    first = trained(cfg, cache_dir=tmp_path)
    assert (tmp_path / f"{cfg.key()}.model").exists()

    def no_training(*args, **kwargs):
        raise AssertionError("a cached model was trained again")

    monkeypatch.setattr(FedAvg, "local_loss", no_training)
    again = trained(cfg, cache_dir=tmp_path)
    assert [r["round"] for r in again.history] == [1, 2]
    assert again.history[-1]["personal_local_acc"] == first.history[-1]["personal_local_acc"]
    for a, b in zip(first.clients, again.clients):
        assert all(torch.equal(a.model[k], b.model[k]) for k in a.model)
    assert all(np.array_equal(x, y) for k in first.final_confusions
               for x, y in zip(first.final_confusions[k], again.final_confusions[k]))


def test_config_groups_participation_and_evaluation_and_keeps_flat_names_keys_and_records():
    from fedlib.experiment.config import EvaluationConfig, ParticipationConfig

    flat = make_config(method="fedavg", fraction=0.5, late_clients=1, late_round=1, eval_every=2, metrics=["fedprp"],
                       eval_clients="participants", **DIGITS)
    grouped = make_config(method="fedavg", participation=ParticipationConfig(0.5, {"late_clients": 1, "late_round": 1}),
                          evaluation={"every": 2, "metrics": ["fedprp"], "clients": "participants"}, **DIGITS)
    assert flat == grouped and flat.key() == grouped.key()
    assert flat.participation == ParticipationConfig(fraction=0.5, own={"late_clients": 1, "late_round": 1})
    assert flat.evaluation == EvaluationConfig(every=2, metrics=["fedprp"], clients="participants")
    # a record's config is the flat dict, and it loads back to the same config
    assert flat.flat()["fraction"] == 0.5 and "participation" not in flat.flat()
    assert make_config(**flat.flat()) == flat
    assert flat.updated(eval_every=3).evaluation.every == 3 and flat.evaluation.every == 2
    with pytest.raises(ConfigError, match="evaluation.each=2 is not allowed: a field of evaluation: every"):
        make_config(evaluation={"each": 2})


def test_a_run_builds_its_method_once(monkeypatch):
    """The key, the validation, the Federation and the record share the config's one method instance."""
    import fedlib.methods

    built = []
    make = fedlib.methods.make_method
    monkeypatch.setattr(fedlib.methods, "make_method", lambda *a, **k: built.append(a[0]) or make(*a, **k))
    cfg = make_config(method="fedprox", dataset="digits", partition={"name": "dirichlet", "alpha": 0.5}, num_clients=4,
                      rounds=1, local_epochs=1, batch_size=32, hyper={"mu": 0.1})
    run(cfg, cache_dir=None, progress=False)
    assert built == ["fedprox"]
    assert cfg.updated(hyper={"mu": 0.2}).built_method().hp.mu == 0.2   # other hyperparameters: another method


def test_zero_embeddings_and_the_collapse_set_by_hand():
    from fedlib.engine.core import Out
    from fedlib.engine.evaluation import METRIC_SETS, Evaluation, zero_embeddings

    z = torch.tensor([[0.0, 0.0], [0.0, 1e-9], [0.0, 0.0], [0.3, -0.2]])
    assert zero_embeddings(Out(z, torch.zeros(4, 3))).tolist() == [2, 4]
    # client 1: 3 of 5 images predicted as class 0 (true 0, 1 and 2 alike), client 2: 1 of 3; 2 and 1 zero embeddings
    c1 = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]])
    c2 = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 0]])
    ev = Evaluation({"personal_local": [c1, c2]}, np.ones((2, 3)),
                    {"personal_local": {"zero_embedding": [np.array([2, 5]), np.array([1, 3])]}})
    assert METRIC_SETS["collapse"].compute(ev) == {"personal_local_class0_share": 4 / 8,
                                                   "personal_local_zero_embedding_share": 3 / 8}
    # without the output fact (an Evaluation built from confusions alone), only the share read off the confusions
    assert METRIC_SETS["collapse"].compute(Evaluation({"personal_local": [c1, c2]}, np.ones((2, 3)))) == {
        "personal_local_class0_share": 4 / 8}


def test_the_collapse_set_is_recorded_at_every_evaluation(monkeypatch):
    """Images darker than the median test image get an all-zero embedding (patched in); the recorded share equals their
    share of the clients' local test images, counted from the partition, and the class-0 share is the one the
    recorded confusions give."""
    from fedlib.engine.evaluation import Evaluator

    outputs = Evaluator._outputs

    def dark(x):
        return x.flatten(1).sum(1) < x.flatten(1).sum(1).median()

    def zeroed(self, params, test_idx):
        out = outputs(self, params, test_idx)
        dead = dark(self.fed.data.data.test_x)[test_idx]
        return out._replace(z=torch.where(dead[:, None], torch.zeros_like(out.z), out.z))

    monkeypatch.setattr(Evaluator, "_outputs", zeroed)
    fed = build(make_config(method="fedproto", metrics=["collapse"], eval_every=1, **DIGITS))
    fed.run()
    idx = torch.cat(list(fed.data.test_idx))
    expected = float(dark(fed.data.data.test_x)[idx].float().mean())
    assert 0 < expected < 1
    rows = [row for row in fed.history if "personal_local_class0_share" in row]
    assert len(rows) == DIGITS["rounds"]
    for row in rows:
        assert row["personal_local_zero_embedding_share"] == pytest.approx(expected)
    C = sum(np.asarray(c) for c in fed.final_confusions["personal_local"])
    assert rows[-1]["personal_local_class0_share"] == pytest.approx(C[:, 0].sum() / C.sum())


@pytest.mark.parametrize("method", ["fedper", "fedmate", "fedavg_ft"])
def test_clients_sharing_a_body_reuse_its_encoder_outputs_bitwise(method, monkeypatch):
    """On a shared test set, clients whose bodies are equal (FedPer's and FedMate's global body) run the body once
    per evaluation; the records equal those of full forward passes. FedAvg-FT's fine-tuned bodies differ: no reuse."""
    from fedlib.engine.evaluation import Evaluator
    from fedlib.engine.training import Trainer

    cfg = make_config(method=method, eval_personal_global=True, eval_every=1, **DIGITS)
    calls = {"features": 0, "features_from": 0}
    for name in calls:
        original = getattr(Trainer, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Trainer, name, counted)
    reused = run(cfg, cache_dir=None, progress=False)
    counts = dict(calls)
    def full_forward(self, params, idx):
        return Trainer.features(self.fed.trainer, params, self.fed.data.data.test_x[idx])

    monkeypatch.setattr(Evaluator, "_outputs", full_forward)
    full = run(cfg, cache_dir=None, progress=False)

    def results(record):
        return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in record["history"]]

    assert results(reused) == results(full) and reused["final_confusions"] == full["final_confusions"]
    # per evaluation 4 clients on the global test set: one body pass and at least 3 reuses where the body is shared
    # (FedMate's global model shares it too); none where each client fine-tuned its own
    if method == "fedavg_ft":
        assert counts["features_from"] == 0
    else:
        assert counts["features_from"] >= 3 * DIGITS["rounds"]
