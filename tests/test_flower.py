"""fedlib on Flower: messages survive Flower's records; a config run through Flower's simulation runtime
(Ray, loopback only) gives the in-process engine's metrics; a failing client stops the run with its
error instead of hanging it; no process is left behind."""
import dataclasses
import json
import math

import numpy as np
import pytest
import torch

flwr = pytest.importorskip("flwr")
pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from fedlib.cli import main  # noqa: E402
from fedlib.errors import ConfigError  # noqa: E402
from fedlib.experiment import build, make_config, run, validate  # noqa: E402
from fedlib.flower import ClientFailed, simulate  # noqa: E402
from fedlib.flower.audit import WireViolation, audit  # noqa: E402
from fedlib.flower.codec import UnsendableValue, from_records, to_records  # noqa: E402
from fedlib.methods import METHODS  # noqa: E402

pytestmark = pytest.mark.slow   # Ray clusters: tens of seconds each

# Flower's clients train with one thread each, the in-process engine with the process's threads: float
# sums may differ in the last bits, nothing more.
TOLERANCE = 1e-5


def digits_config(method: str, **hyper):
    return make_config(method=method, dataset="digits", partition={"name": "dirichlet", "alpha": 0.5}, num_clients=4,
                       rounds=2, local_epochs=1, batch_size=32, lr=0.05, hyper=hyper)


def assert_same_metrics(a: dict, b: dict, tol=TOLERANCE, where="history"):
    assert a.keys() == b.keys(), where
    for key in a:
        if key == "elapsed_s":
            continue
        if isinstance(a[key], dict):   # a method's round log (FedGPA's weights)
            assert_same_metrics(a[key], b[key], tol, f"{where}.{key}")
            continue
        x, y = np.asarray(a[key], dtype=float), np.asarray(b[key], dtype=float)
        assert np.allclose(x, y, atol=tol, rtol=tol, equal_nan=True), (f"{where}.{key}", a[key], b[key])


def child_pids() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def no_processes_left():
    """A check that every process started since the test began (Ray's, Flower's) has ended; earlier
    tests' worker pools (the process executor keeps one) are not the test's."""
    before = child_pids()
    return lambda: _ended_since(before)


def _ended_since(before: set, grace_s: float = 20.0) -> bool:
    import time

    end = time.time() + grace_s
    while True:
        alive = [p for p in psutil.Process().children(recursive=True)
                 if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.time() > end:
            return not alive
        time.sleep(0.5)


def test_messages_round_trip_through_flower_records():
    message = {"prototypes": {3: torch.randn(8), 7: torch.randn(8)}, "mask": torch.tensor([True, False]),
               "counts": np.array([4, 0, 2]), "pair": (1, 2.5), "missing": None, "loss": float("nan"),
               "name": "fedgpa", "models": [{"w": torch.zeros(2, 3, dtype=torch.float64)}], (0, 1): "tuple key"}
    records = to_records(message)
    assert isinstance(records, flwr.app.RecordDict)
    back = from_records(records)
    assert set(back) == set(message) and set(back["prototypes"]) == {3, 7}
    assert torch.equal(back["prototypes"][3], message["prototypes"][3])
    assert back["mask"].dtype == torch.bool and back["mask"].tolist() == [True, False]
    assert back["models"][0]["w"].dtype == torch.float64
    assert np.array_equal(back["counts"], message["counts"]) and back["pair"] == (1, 2.5)
    assert back["missing"] is None and math.isnan(back["loss"]) and back[(0, 1)] == "tuple key"
    with pytest.raises(UnsendableValue, match=r"upload\['ids'\] is a set"):
        to_records({"ids": {1, 2}}, "upload")


# the six methods: FedAvg; SCAFFOLD (a private control variate); Ditto (a private personal model);
# FedProto, FedPAC and FedGPA (prototype methods; FedGPA keeps a personal model)
@pytest.mark.parametrize("method, hyper", [("fedavg", {}), ("scaffold", {}), ("ditto", {}), ("fedproto", {}),
                                           ("fedpac", {}), ("fedgpa", {"mu": 0.4})])
def test_flower_simulation_gives_the_in_process_records_and_sends_nothing_private(method, hyper, no_processes_left):
    from fedlib.flower import serverapp

    cfg = digits_config(method, **hyper)
    local = run(cfg, cache_dir=None, progress=False)
    serverapp.WIRE_TAP = []
    try:
        flower = run(dataclasses.replace(cfg, engine="flower"), cache_dir=None, progress=False)
        wire = serverapp.WIRE_TAP
    finally:
        serverapp.WIRE_TAP = None
    assert flower["engine"] == "flower" and flower["executor"] == "flower" and local["engine"] == "inprocess"
    assert len(flower["history"]) == len(local["history"]) == 2
    for a, b in zip(local["history"], flower["history"]):
        assert_same_metrics(a, b)
    assert_same_metrics(local["final"], flower["final"], where="final")
    assert flower["key"] == local["key"]   # the engine does not change the result: same cache entry
    counts = audit(wire, build(cfg))
    nodes = cfg.num_clients   # one virtual node per client: one message per node and step
    assert counts == {("to node", "query"): nodes, ("from node", "query"): nodes,
                      ("to node", "train"): 2 * nodes, ("from node", "train"): 2 * nodes,
                      ("to node", "evaluate"): 2 * nodes, ("from node", "evaluate"): 2 * nodes}
    assert no_processes_left()


def test_a_node_holds_several_clients(no_processes_left):
    """Two virtual nodes for four clients (node p holds clients p and p + 2): the same records, one message per
    node and round."""
    from fedlib.flower import serverapp

    cfg = digits_config("ditto")
    local = run(cfg, cache_dir=None, progress=False)
    serverapp.WIRE_TAP = []
    try:
        fed = simulate(dataclasses.replace(cfg, engine="flower"), nodes=2, timeout=120)
        wire = serverapp.WIRE_TAP
    finally:
        serverapp.WIRE_TAP = None
    for a, b in zip(local["history"], fed.history):
        assert_same_metrics(a, b)
    trains = [content for direction, kind, _, content in wire if (direction, kind) == ("to node", "train")]
    assert len(trains) == 4 and sorted(len(c["tasks"]) for c in trains) == [2, 2, 2, 2]
    assert sorted(sorted(t["client_id"] for t in c["tasks"]) for c in trains[:2]) == [[0, 2], [1, 3]]
    assert no_processes_left()


# Ditto: a private personal model on the nodes, the global model's parameters under SecAgg+
@pytest.mark.parametrize("method", ["fedavg", "ditto"])
def test_secagg_plus_gives_the_in_process_model_and_no_node_sends_its_vector_in_the_clear(method, no_processes_left):
    """SecAgg+ between two nodes of two clients each: the global model after round 1 is the in-process one up to
    Flower's quantization (2**22 levels over [-8, 8]), the metrics close to it; no reply of a node holds a tensor
    in the clear (the masked vector travels as bytes, unmasked only as the sum), and the clients' tasks hold only
    their envelopes."""
    from fedlib.experiment.runner import run_in_process
    from fedlib.flower import serverapp

    cfg = dataclasses.replace(digits_config(method), secure_aggregation="secagg+")
    after_round_1: dict = {}

    def keep_round_1(engine):
        def callback(federation, t):
            if t == 0:
                after_round_1[engine] = {k: v.clone() for k, v in federation.server.state["global"].items()}
        return callback

    local = run_in_process(dataclasses.replace(cfg, secure_aggregation=None), callbacks=[keep_round_1("local")])
    serverapp.WIRE_TAP = []
    try:
        fed = simulate(dataclasses.replace(cfg, engine="flower"), nodes=2, timeout=120,
                       callbacks=[keep_round_1("flower")])
        wire = serverapp.WIRE_TAP
    finally:
        serverapp.WIRE_TAP = None
    gap = max(float((after_round_1["flower"][k] - v).abs().max()) for k, v in after_round_1["local"].items())
    assert 0 < gap < 2e-5, gap   # quantized (steps of 16 / 2**22 = 3.8e-6), so not bit-equal: a few steps apart
    for a, b in zip(local.history, fed.history):   # the second round's training carries the difference on (a
        # nearly untrained model: a client's accuracy moves by a test sample or two, the mean by less)
        assert all(abs(a[k] - b[k]) < 0.02 for k in ("train_loss", "global_acc", "personal_local_acc")), (a, b)
    secure = [(d, node, c) for d, kind, node, c in wire if kind == "secagg+"]
    replies = [c for d, _, c in secure if d == "from node"]
    assert len(replies) == 2 * 4 * 2   # 2 rounds x 4 stages x 2 nodes
    assert all(sum(c["arrays"].values()) == 0 for c in replies)   # nothing in the clear: bytes in config records
    tasks = [t for d, _, c in secure if d == "to node" and "tasks" in c for t in c["tasks"]]
    assert len(tasks) == 2 * 4 and all(set(t) == {"client_id", "received", "trained_in"} for t in tasks)
    assert not any(kind == "train" for _, kind, _, _ in wire)   # every round went through SecAgg+
    audit(wire, build(cfg))
    leak = [("from node", "secagg+", 1, {"configs": {}, "arrays": {"fitres.parameters": 8}})]
    with pytest.raises(WireViolation, match="tensors in the clear"):
        audit(leak, build(cfg))
    assert no_processes_left()


def test_secagg_plus_is_refused_for_a_method_whose_server_needs_each_upload():
    served = [name for name, cls in METHODS.items() if cls.sums_uploads()]
    assert {"fedavg", "fedprox", "ditto", "fedper"} <= set(served)
    assert not {"scaffold", "fedproto", "fedpac", "fedgpa", "local"} & set(served)
    with pytest.raises(ConfigError, match="only None for scaffold, whose server needs each client's upload.*fedavg"):
        validate(make_config(method="scaffold", engine="flower", secure_aggregation="secagg+"))
    with pytest.raises(ConfigError, match="engine='flower'"):
        validate(make_config(method="fedavg", secure_aggregation="secagg+"))
    with pytest.raises(ConfigError, match="'secagg\\+' or None"):
        validate(make_config(method="fedavg", engine="flower", secure_aggregation="homomorphic"))


class InProcessGrid:
    """The Grid calls fedlib's server makes, answered in this process by fedlib's ClientApp (its handlers and
    mods: SecAgg+'s included); node p + 1 of n
    holds the clients i with i mod n = p. A node in ``lost`` answers its first ``lost[node]`` rounds (train and
    evaluate messages), then everything as Flower answers for a node that stopped (``NODE_UNAVAILABLE``)."""

    def __init__(self, nodes: int, lost: dict[int, int]):
        from flwr.app import Context, RecordDict

        self.contexts = {p + 1: Context(run_id=1, node_id=p + 1, state=RecordDict(), run_config={},
                                        node_config={"partition-id": p, "num-partitions": nodes}) for p in range(nodes)}
        self.lost, self.rounds, self.replies = lost, {}, {}

    def get_node_ids(self):
        return list(self.contexts)

    def push_messages(self, messages):
        import copy
        import uuid

        from flwr.app import Error, Message
        from flwr.common.constant import ErrorCode

        from fedlib.flower.clientapp import client_app

        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = str(uuid.uuid4())   # as Flower's SuperLink sets it
            node, kind = m.metadata.dst_node_id, m.metadata.message_type
            if node in self.lost and self.rounds.get(node, 0) >= self.lost[node]:
                reply = Message(Error(ErrorCode.NODE_UNAVAILABLE, "Error: Node Unavailable (test)"), reply_to=m)
            else:   # a node gets its own copy, as over a network (SecAgg+'s mod edits what it receives)
                reply = client_app(copy.deepcopy(m), self.contexts[node])
                self.rounds[node] = self.rounds.get(node, 0) + (kind == "evaluate")
            self.replies[m.metadata.message_id] = reply
            ids.append(m.metadata.message_id)
        return ids

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in ids if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))


@pytest.fixture
def server_process(monkeypatch):
    """What Flower's runtime sets in a ServerApp's process (messages need a run id)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


@pytest.mark.parametrize("node_loss", ["stop", "continue"])
def test_a_lost_node_stops_the_run_or_its_clients_are_left_out_and_the_record_says_so(node_loss, server_process):
    """Node 2 (clients 1 and 3) answers round 1, then is gone: "stop" ends the run with Flower's reason;
    "continue" trains and evaluates rounds 2-3 without its clients, says so and records it (no Ray: the nodes'
    handlers answer in this process)."""
    from fedlib.experiment.records import record_of
    from fedlib.flower.serverapp import serve

    cfg = dataclasses.replace(digits_config("fedavg"), rounds=3, engine="flower")
    local = run(dataclasses.replace(cfg, engine="inprocess"), cache_dir=None, progress=False)
    grid = InProcessGrid(2, lost={2: 1})
    if node_loss == "stop":
        with pytest.raises(ClientFailed, match=r"clients \[1, 3\] failed on their Flower node \(round 2\): "
                                               "Error: Node Unavailable"):
            serve(grid, cfg, node_loss=node_loss)
        return
    fed = serve(grid, cfg, node_loss=node_loss)
    assert fed.executor.left_out == {1: [1, 3], 2: [1, 3]} and set(fed.executor.gone) == {2}
    assert_same_metrics(local["history"][0], fed.history[0])   # round 1: every client, as in-process
    assert [len(h["personal_local_acc_clients"]) for h in fed.history] == [4, 2, 2]
    assert fed.history[1]["global_acc"] != local["history"][1]["global_acc"]   # trained on clients 0 and 2 only
    assert record_of(cfg, fed, 0.0)["left_out"] == {"2": [1, 3], "3": [1, 3]}
    with pytest.raises(ConfigError, match="node_loss"):
        serve(InProcessGrid(2, {}), cfg, node_loss="retry")


class SilentGrid(InProcessGrid):
    """Node 2 answers round 1, then receives every message and never answers (no error, no reply)."""

    def push_messages(self, messages):
        messages = list(messages)
        ids = super().push_messages(messages)
        for m, i in zip(messages, ids):
            if m.metadata.dst_node_id == 2 and self.rounds.get(2, 0) > 1:
                self.replies.pop(i)
        return ids


@pytest.mark.parametrize("node_loss", ["stop", "continue"])
def test_a_node_that_stops_answering_is_a_failure_within_the_timeout(node_loss, server_process):
    """Issue 67's probe: a node that goes silent had simulate(timeout=25) running past 240 s. The server's wait ends
    at the timeout: "stop" ends the run naming the node, "continue" leaves its clients out."""
    import time

    from fedlib.flower.serverapp import serve

    cfg = dataclasses.replace(digits_config("fedavg"), rounds=3, engine="flower")
    started = time.time()
    if node_loss == "stop":
        with pytest.raises(ClientFailed, match=r"Flower node\(s\) \[2\] did not answer within 2 s"):
            serve(SilentGrid(2, {}), cfg, node_loss=node_loss, timeout=2)
    else:
        fed = serve(SilentGrid(2, {}), cfg, node_loss=node_loss, timeout=2)
        assert set(fed.executor.gone) == {2} and fed.executor.left_out[2] == [1, 3]
    assert time.time() - started < 60


@pytest.mark.parametrize("node_loss", ["stop", "continue"])
def test_secagg_plus_goes_on_without_a_node_lost_between_rounds(node_loss, server_process):
    """Node 3 of 3 (clients 2 and 5) is gone from round 2 on: it does not answer SecAgg+'s setup, so it leaves
    the round and the other two nodes' sum is unmasked; "stop" ends the run there, "continue" goes on."""
    from fedlib.flower.serverapp import serve

    cfg = dataclasses.replace(digits_config("fedavg"), num_clients=6, rounds=2, engine="flower",
                              secure_aggregation="secagg+")
    grid = InProcessGrid(3, lost={3: 1})
    if node_loss == "stop":
        with pytest.raises(ClientFailed, match=r"clients \[2, 5\] are not in round 2's secure aggregate"):
            serve(grid, cfg, node_loss=node_loss)
        return
    fed = serve(grid, cfg, node_loss=node_loss)
    assert fed.executor.left_out == {1: [2, 5]} and set(fed.executor.gone) == {3}
    assert [len(h["personal_local_acc_clients"]) for h in fed.history] == [6, 4]


def test_node_config_names_the_clients_a_node_holds():
    from fedlib.flower.messages import held_clients

    assert held_clients({"clients": "3,7"}, 10) == [3, 7]
    assert held_clients({"clients": "0-2, 9"}, 10) == [0, 1, 2, 9]
    assert held_clients({"partition-id": 1, "num-partitions": 3}, 8) == [1, 4, 7]
    with pytest.raises(ConfigError, match="ids from 0 to 9"):
        held_clients({"clients": "3,12"}, 10)
    with pytest.raises(ConfigError, match="client ids such as"):
        held_clients({"clients": "three"}, 10)
    with pytest.raises(ConfigError, match="clients='<ids>'"):
        held_clients({}, 10)


def test_an_undeclared_key_is_refused_before_it_travels():
    from fedlib.flower.messages import UndeclaredKey, check_declared
    from fedlib.methods import make_method

    method = make_method("fedproto")
    check_declared(method, "upload", {"protos": 1, "counts": 2}, 0)
    with pytest.raises(UndeclaredKey, match=r"fedproto's upload to/from client 3 holds \['features'\]"):
        check_declared(method, "upload", {"protos": 1, "features": 2}, 3)


def test_command_line_engine_flower_writes_the_in_process_record(tmp_path, no_processes_left):
    args = ["run", "--method", "fedavg", "--dataset", "digits", "--partition", "dirichlet", "alpha=0.5", "--clients",
            "4", "--budget", "smoke", "--set", "batch_size=32", "lr=0.05", "--cache", "none", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "local.json")]) == 0
    assert main([*args, "--engine", "flower", "--out", str(tmp_path / "flower.json")]) == 0
    local, flower = (json.loads((tmp_path / f"{n}.json").read_text())[0] for n in ("local", "flower"))
    assert set(local) == set(flower)  # the same record, field for field
    assert flower["config"]["engine"] == "flower"
    assert_same_metrics(local["final"], flower["final"])
    assert no_processes_left()


def test_a_client_that_raises_stops_the_run_with_its_error(no_processes_left):
    from flwr.clientapp import ClientApp

    from fedlib.flower.clientapp import evaluate, query, train
    from fedlib.flower.messages import RUN

    faulty = ClientApp()
    faulty.query()(query)
    faulty.evaluate()(evaluate)

    @faulty.train()
    def fail_for_client_one(msg, context):
        if [t["client_id"] for t in from_records(msg.content)["tasks"]] == [1]:
            raise RuntimeError("disk full on client 1")
        assert RUN in msg.content.config_records
        return train(msg, context)

    cfg = dataclasses.replace(digits_config("fedavg"), engine="flower")
    with pytest.raises(ClientFailed, match=r"^client 1 failed on its Flower node \(round 1\): "
                                          r"RuntimeError: disk full on client 1$") as failure:
        simulate(cfg, client=faulty, timeout=120)
    assert "fail_for_client_one" in failure.value.detail   # the node's whole report is kept
    assert no_processes_left()


def test_engine_is_validated():
    with pytest.raises(ConfigError, match="engine='ray' is not allowed: one of inprocess, flower"):
        validate(dataclasses.replace(digits_config("fedavg"), engine="ray"))


def test_nan_on_a_node_reads_as_it_does_in_process(no_processes_left):
    """A client's loss turning NaN on its node stops the run with the in-process run's TrainingDiverged line."""
    from fedlib.errors import TrainingDiverged

    cfg = dataclasses.replace(digits_config("fedavg"), lr=1e6)
    with pytest.raises(TrainingDiverged) as local:
        run(cfg, cache_dir=None, progress=False)
    with pytest.raises(TrainingDiverged) as flower:
        simulate(dataclasses.replace(cfg, engine="flower"), timeout=120)
    assert str(flower.value) == str(local.value)
    assert no_processes_left()


@pytest.mark.parametrize("signum, resume", [("SIGINT", False), ("SIGTERM", True)])
def test_a_signal_stops_a_flower_run_within_seconds_and_it_resumes(signum, resume, tmp_path, no_processes_left):
    """Ctrl-C or SIGTERM after round 1 (one handler serves both): the run ends in seconds with KeyboardInterrupt
    (the command line's resume message) and leaves no Ray or Flower process; the same call resumes from the
    checkpoint to the records of an uninterrupted run, Ditto's personal models read back from the nodes' state folder
    (checked once: the resume does not depend on the signal)."""
    import os
    import signal
    import time

    cfg = dataclasses.replace(digits_config("ditto"), engine="flower", rounds=3)   # private personal models
    sent = {}

    def signal_after_round_one(fed, t):
        if t == 0 and not sent:
            sent["at"] = time.time()
            os.kill(os.getpid(), getattr(signal, signum))

    with pytest.raises(KeyboardInterrupt):
        simulate(cfg, checkpoint=tmp_path / "run.ckpt", callbacks=[signal_after_round_one], timeout=120)
    assert time.time() - sent["at"] < 30
    assert no_processes_left()
    if not resume:
        return
    fed = simulate(cfg, checkpoint=tmp_path / "run.ckpt", timeout=120)
    assert fed.start_round >= 1 and len(fed.history) == 3
    reference = run(dataclasses.replace(cfg, engine="inprocess"), cache_dir=None, progress=False)
    assert_same_metrics(fed.history[-1], reference["history"][-1])
    assert no_processes_left()


def test_the_reaper_ends_what_a_killed_process_started(tmp_path):
    """SIGKILL cannot be handled: the watchdog ends the processes its parent listed once the parent is gone."""
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        f"pidfile = {str(tmp_path / 'pids')!r}\n"
        "reaper = subprocess.Popen([sys.executable, '-m', 'fedlib.flower.reaper', str(os.getpid()), pidfile],"
        " start_new_session=True)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        "import psutil\n"
        "p = psutil.Process(child.pid)\n"
        "open(pidfile, 'w').write(f'{child.pid} {p.create_time()}\\n')\n"
        "print(child.pid, reaper.pid, flush=True)\n"
        "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child, reaper = map(int, parent.stdout.readline().split())
    parent.kill()
    parent.wait()
    end = time.time() + 20
    while time.time() < end and psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.2)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
