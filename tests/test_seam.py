"""The client/server seam, client seeds, metric sets and the cache key."""
import dataclasses
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlib.engine.core import Server
from fedlib.engine.evaluation import METRIC_SETS, register_metric_set
from fedlib.errors import ConfigError
from fedlib.experiment import build, make_config, run, validate
from fedlib.methods import METHODS
from fedlib.methods.base import Method
from fedlib.metrics import accuracy, group_accuracy, harmonic

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05)
ROOT = Path(__file__).resolve().parents[1]


def test_no_method_reads_an_executor_or_a_client_object():
    for path in (ROOT / "fedlib" / "methods").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"executor\.(x|y)|\bexecutor\b", text), path.name
        assert "clients[" not in text and "client.state" not in text, path.name


@pytest.mark.parametrize("name", list(METHODS))
def test_hook_signatures_keep_the_two_sides_apart(name):
    cls = METHODS[name]
    server_hooks = {"init_server": ["server", "init"], "broadcast": ["server", "client_id"],
                    "aggregate": ["server", "uploads"], "global_params": ["server"]}
    client_hooks = {"init_client": ["state", "init"], "receive": ["ctx"], "local_phases": ["ctx"],
                    "upload": ["ctx", "models", "result"], "eval_params": ["ctx"], "predict": ["out", "ctx", "variant"]}
    for hook, params in {**server_hooks, **client_hooks}.items():
        assert list(inspect.signature(getattr(cls, hook)).parameters)[1:] == params, (name, hook)


def test_the_client_context_is_frozen():
    fed = build(make_config(method="scaffold", **DIGITS))
    ctx = fed.context(fed.task(fed.clients[0], 0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.received = {}
    assert ctx.size == fed.clients[0].size and torch.equal(ctx.counts, fed.clients[0].counts)
    assert torch.equal(ctx.labels.bincount(minlength=10).float(), ctx.counts)
    out = ctx.features(ctx.model)
    assert out.z.shape[0] == ctx.size


def test_server_hooks_work_from_server_state_and_ids_alone():
    """Broadcast and aggregation run on a bare Server: no client object is needed."""
    fed = build(make_config(method="fedgpa", **DIGITS))
    fed.run_round(0)
    server = Server(num_clients=fed.server.num_clients, state=fed.server.state)
    uploads = {}
    for c in fed.clients:
        msg = fed.method.broadcast(server, c.id)
        assert set(msg) == {"params", "protos", "present"}
        uploads[c.id] = {"params": msg["params"], "n": c.size, "counts": c.counts.long(),
                         "protos": msg["protos"], "variance": torch.tensor(0.1)}
    fed.method.aggregate(server, uploads)
    assert set(server.state["personal"]) == {0, 1, 2, 3}


def test_client_seeds_follow_the_experiment_seed():
    """ctx.seed = derived_seed(experiment seed, round, client); FedPCL's prototype noise (Section
    5.6) draws from it, so it changes with the experiment seed and repeats with it."""
    from fedlib.engine.core import LocalResult, derived_seed

    cfg = make_config(method="fedpcl", hyper={"noise": 0.5}, model="mlp", **DIGITS)
    fed = build(cfg)
    ctx = fed.context(fed.task(fed.clients[1], 3))
    assert ctx.seed == derived_seed(cfg.seed, 3, 1)
    assert len({fed.context(fed.task(fed.clients[i], t)).seed for i in (0, 1) for t in (0, 1)}) == 4

    def noisy_protos(seed):
        c = dataclasses.replace(ctx, seed=seed, state={})
        return fed.method.upload(c, {"local": c.model}, LocalResult(steps=1, loss=0.0))["protos"]

    assert torch.equal(noisy_protos(ctx.seed), noisy_protos(ctx.seed))
    other = build(dataclasses.replace(cfg, seed=5)).context(fed.task(fed.clients[1], 3)).seed
    assert other != ctx.seed and not torch.equal(noisy_protos(ctx.seed), noisy_protos(other))


def test_ditto_personal_model_starts_from_the_initial_model():
    fed = build(make_config(method="ditto", **DIGITS))
    init = {k: v.clone() for k, v in fed.clients[2].model.items()}
    fed.run_round(0)
    # after round 1 the personal model is v^0 = w^0 moved by its own phase; the proximal anchor is w^0
    ctx = fed.context(fed.task(fed.clients[2], 1))
    assert "personal" in ctx.state
    models = fed.method.receive(ctx)
    assert models["personal"] is ctx.state["personal"]
    fresh = build(make_config(method="ditto", **DIGITS))
    start = fresh.method.receive(fresh.context(fresh.task(fresh.clients[2], 0)))["personal"]
    assert all(torch.equal(start[k], init[k]) for k in init)


def test_metric_sets_from_the_final_confusions():
    cfg = make_config(
        method="fedrep",
        metrics=["class_groups", "fedprp", "generalization"],
        eval_personal_global=True,
        **{**DIGITS, "partition": {"name": "shards", "s": 3, "imbalance": 0.2}},
    )
    with pytest.raises(ConfigError, match="metrics"):
        validate(cfg.updated(metrics=["nope"]))
    record = run(cfg, cache_dir=None, progress=False)
    final, conf = record["final"], record["final_confusions"]
    personal_global = [np.array(C) for C in conf["personal_global"]]
    personal_local = [np.array(C) for C in conf["personal_local"]]
    assert np.isclose(final["a_loc"], np.mean([accuracy(C) for C in personal_global]))
    assert np.isclose(final["a_sel"], np.mean([accuracy(C) for C in personal_local]))
    assert "a_glo" not in final and "hm" not in final  # FedRep has no global model
    counts = np.array(record["train_counts"]).sum(0)
    order = np.argsort(-counts, kind="stable")
    few = np.sort(order[5:])
    assert np.isclose(final["personal_global_few"], group_accuracy(sum(personal_global), few))


def test_generalization_metrics_of_a_method_with_a_global_model():
    record = run(make_config(method="fedavg", metrics=["generalization"], **DIGITS), cache_dir=None, progress=False)
    final = record["final"]
    assert np.isclose(final["acc_global"], final["global_acc"])
    assert np.isclose(final["hm"], harmonic(final["global_acc"], final["personal_local_i_local"]))


def test_a_chapter_can_register_its_own_metric_set():
    register_metric_set("test_worst_client", ("personal_local",),
                        lambda ev: {"worst_client_acc": min(accuracy(C) for C in ev.get("personal_local"))})
    try:
        record = run(make_config(method="fedavg", metrics=["test_worst_client"], **DIGITS), cache_dir=None,
                     progress=False)
        assert np.isclose(record["final"]["worst_client_acc"], min(record["final"]["personal_local_acc_clients"]))
    finally:
        METRIC_SETS.pop("test_worst_client")


def test_cache_key_holds_method_versions_not_the_executor(monkeypatch):
    prox, avg = make_config(method="fedprox"), make_config(method="fedavg")
    before = prox.key(), avg.key()
    assert dataclasses.replace(prox, executor="batched", workers=3, device="cuda").key() == before[0]
    monkeypatch.setattr(METHODS["fedprox"], "version", 7)
    assert prox.key() != before[0] and avg.key() == before[1]
    monkeypatch.setattr(Method, "version", 2)  # the base class: every method recomputes
    assert avg.key() != before[1]


def test_backbone_input_size_is_part_of_the_key_when_backbones_are_used():
    plain = make_config(method="fedpcl")
    assert dataclasses.replace(plain, backbone_input=96).key() == plain.key()
    feats = make_config(method="fedpcl", dataset="digit4", backbones=["effnet_lite0"], partition={"name": "domains"},
                        num_clients=4)
    assert dataclasses.replace(feats, backbone_input=96).key() != feats.key()


@pytest.mark.parametrize("kwargs, field", [({"executor": "gpu"}, "executor"), ({"workers": 0}, "workers"),
                                           ({"backbone_input": 4}, "backbone_input")])
def test_bad_engine_settings_are_refused(kwargs, field):
    with pytest.raises(ConfigError) as err:
        validate(make_config(**kwargs))
    assert err.value.field == field



def tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v)


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "fedgpa", "fedproto", "fedprp", "pfedcspc"])
def test_what_a_client_receives_shares_no_storage_with_the_server_state(name):
    fed = build(make_config(method=name, **DIGITS))
    fed.run_round(0)   # round 1 sends what the first aggregation made (prototypes, control variates)
    received = [t for ctx in [fed.context(task) for task in fed.open_round(1)] + [fed.anonymous_context(1)]
                for t in tensors_in(ctx.received)]
    server_storage = {t.untyped_storage().data_ptr() for t in tensors_in(fed.server.state)}
    assert received and not any(t.untyped_storage().data_ptr() in server_storage for t in received), name


class Vandal(Method):
    """Writes into what it received, in place: the server's model must not change."""
    name = "test_vandal"

    def receive(self, ctx):
        for t in ctx.received["params"].values():
            t.add_(1000.0)
        return super().receive(ctx)


def test_a_client_writing_into_what_it_received_cannot_change_the_server_model(monkeypatch):
    monkeypatch.setitem(METHODS, Vandal.name, Vandal)
    fed = build(make_config(method=Vandal.name, **DIGITS))
    before = {k: v.clone() for k, v in fed.server.state["global"].items()}
    fed.executor.run(fed.method, fed.open_round(0))
    assert all(torch.equal(fed.server.state["global"][k], v) for k, v in before.items())


class ScratchUser(Method):
    """Keeps a per-update value in ``ctx.scratch``: fresh at every update, readable inside the (vmapped) loss,
    never stored with the client."""
    name = "test_scratch"

    def receive(self, ctx):
        assert ctx.scratch == {}, "scratch must start empty at every update"
        ctx.scratch["scale"] = torch.tensor(1.0 + ctx.round)
        return super().receive(ctx)

    def local_loss(self, out, batch, params, ctx):
        return super().local_loss(out, batch, params, ctx) * ctx.scratch["scale"] / (1.0 + ctx.round)

    def upload(self, ctx, models, result):
        assert float(ctx.scratch["scale"]) == 1.0 + ctx.round
        return super().upload(ctx, models, result)


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_scratch_is_fresh_each_update_read_by_the_loss_and_never_kept(monkeypatch, executor):
    monkeypatch.setitem(METHODS, ScratchUser.name, ScratchUser)
    fed = build(make_config(method=ScratchUser.name, executor=executor, **DIGITS))
    fed.run()
    assert all("scale" not in slot.state for slot in fed.clients)
    plain = build(make_config(method="fedavg", executor=executor, **DIGITS))
    plain.run()
    assert fed.history[-1]["personal_local_acc"] == pytest.approx(plain.history[-1]["personal_local_acc"], abs=1e-6)


class ViewReader(Method):
    """FedAvg whose loss notes what context it was given."""
    name = "test_view_reader"
    seen: list = []

    def local_loss(self, out, batch, params, ctx):
        ViewReader.seen.append((type(ctx).__name__, sorted(f.name for f in dataclasses.fields(ctx))))
        return super().local_loss(out, batch, params, ctx)


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_a_local_objective_sees_the_same_narrow_context_under_every_executor(monkeypatch, executor):
    from fedlib.engine.core import LossContext

    monkeypatch.setitem(METHODS, ViewReader.name, ViewReader)
    monkeypatch.setattr(ViewReader, "seen", [])
    build(make_config(method=ViewReader.name, executor=executor, **DIGITS)).run()
    fields = sorted(f.name for f in dataclasses.fields(LossContext))
    assert ViewReader.seen and all(seen == ("LossContext", fields) for seen in ViewReader.seen)
    assert not {"client_id", "seed", "model", "labels", "size", "features", "validation"} & set(fields)
