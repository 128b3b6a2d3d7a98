"""Adding a paper from outside fedlib: a method with its own server rule and its own metric set, registered
where it is defined (the walk-through of ARCHITECTURE.md), runs through the engine unchanged."""
import dataclasses
from pathlib import Path

import pytest
import torch

from fedlib.engine.evaluation import METRIC_SETS, Evaluation, register_metric_set
from fedlib.errors import ConfigError
from fedlib.experiment import make_config, run
from fedlib.methods import METHODS, Method, register
from fedlib.metrics import accuracy

DIGITS = dict(dataset="digits", partition={"name": "iid"}, num_clients=4, rounds=3, local_epochs=2, batch_size=32,
              lr=0.2, executor="sequential")


@pytest.fixture
def median_paper():
    """A 'paper' with a coordinate-wise median server and a worst-client metric, registered for one test."""

    @register("example_fedmedian", "FedMedian", "an example: coordinate-wise median aggregation", cite=None)
    class FedMedian(Method):
        def aggregate(self, server, uploads):
            ups = [u["params"] for u in uploads.values()]
            server.state["global"] = {k: torch.stack([u[k] for u in ups]).median(0).values for k in ups[0]}

    def worst_client(ev: Evaluation) -> dict:
        confs = ev.get("personal_local")
        return {"worst_client_acc": min(accuracy(C) for C in confs)} if confs else {}

    register_metric_set("worst_client", ("personal_local",), worst_client, "the lowest client accuracy")
    yield FedMedian
    METHODS.pop(FedMedian.name)
    METRIC_SETS.pop("worst_client")


def test_a_method_with_its_own_metric_set_runs_without_touching_the_engine(median_paper):
    record = run(make_config(method="example_fedmedian", metrics=["worst_client"], **DIGITS), cache_dir=None,
                 progress=False)
    last = record["final"]
    assert last["worst_client_acc"] == pytest.approx(min(last["personal_local_acc_clients"]))
    assert last["global_acc"] > 0.5   # it trains: 10 classes, chance is 0.1 (FedAvg: 0.82)


def test_the_median_rule_by_hand(median_paper):
    from fedlib.engine.core import Server

    server = Server(num_clients=3)
    method = median_paper()
    method.init_server(server, {"w": torch.zeros(2)})
    method.aggregate(server, {i: {"params": {"w": torch.tensor(v)}, "n": 1}
                              for i, v in enumerate([[1.0, 9.0], [5.0, 2.0], [3.0, 4.0]])})
    assert server.state["global"]["w"].tolist() == [3.0, 4.0]


def test_a_second_class_may_not_take_a_registered_name(median_paper):
    clash = type("Clash", (Method,), {"name": "example_fedmedian"})
    with pytest.raises(ValueError, match="taken by"):
        register(clash)


def test_register_states_the_identity_it_is_given_and_keeps_the_rest():
    """The one-line form sets name, label, paper and cite on the class; an argument not given is inherited, and
    ``cite=None`` (no paper to cite) is a value, not an omission."""
    @register("example_identity", paper="an example")
    class Identity(Method):
        pass

    try:
        assert METHODS["example_identity"] is Identity
        assert (Identity.name, Identity.paper) == ("example_identity", "an example")
        assert (Identity.label, Identity.cite) == (Method.label, Method.cite)   # not given: inherited
        assert register("example_identity", cite=None)(Identity).cite is None
        assert Method.cite == "mcmahan2017fedavg"   # the base class is untouched
    finally:
        METHODS.pop("example_identity")


def test_an_unknown_metric_set_is_a_config_error_naming_the_registered_ones():
    with pytest.raises(ConfigError, match="metric sets among standard"):
        run(make_config(method="fedavg", metrics=["nope"], **DIGITS), cache_dir=None, progress=False)


def test_every_shipped_method_is_registered_under_its_name():
    import fedlib.methods as methods

    shipped = {getattr(methods, n) for n in methods.__all__ if isinstance(getattr(methods, n), type)
               and issubclass(getattr(methods, n), Method) and getattr(methods, n) is not Method}
    assert {c.name for c in shipped} == set(METHODS) and all(METHODS[c.name] is c for c in shipped)
    # every module of fedlib/methods (but the base class and the registry) ships at least one registered method:
    # no count to update when a paper adds its module
    modules = {p.stem for p in Path(methods.__file__).parent.glob("*.py")} - {"__init__", "base", "registry"}
    assert {c.__module__.rsplit(".", 1)[-1] for c in shipped} == modules
    assert all(dataclasses.is_dataclass(c.Hyper) and c.paper for c in shipped)
