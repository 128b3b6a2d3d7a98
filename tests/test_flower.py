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
from fedlib.experiment import make_config, run, validate  # noqa: E402
from fedlib.flower import ClientFailed, simulate  # noqa: E402
from fedlib.flower.codec import UnsendableValue, from_records, to_records  # noqa: E402

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


@pytest.mark.parametrize("method, hyper", [("fedproto", {}), ("fedgpa", {"mu": 0.4})])
def test_flower_simulation_gives_the_in_process_metrics(method, hyper, no_processes_left):
    cfg = digits_config(method, **hyper)
    local = run(cfg, cache_dir=None, progress=False)
    flower = run(dataclasses.replace(cfg, engine="flower"), cache_dir=None, progress=False)
    assert flower["engine"] == "flower" and flower["executor"] == "flower" and local["engine"] == "inprocess"
    assert len(flower["history"]) == len(local["history"]) == 2
    for a, b in zip(local["history"], flower["history"]):
        assert_same_metrics(a, b)
    assert flower["key"] == local["key"]   # the engine does not change the result: same cache entry
    assert no_processes_left()


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

    from fedlib.flower.apps import RUN, train

    faulty = ClientApp()

    @faulty.train()
    def fail_for_client_one(msg, context):
        if from_records(msg.content)["client_id"] == 1:
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
    checkpoint to the records of an uninterrupted run (checked once: the resume does not depend on the signal)."""
    import os
    import signal
    import time

    cfg = dataclasses.replace(digits_config("fedavg"), engine="flower", rounds=3)
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
