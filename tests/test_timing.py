"""Time per round measured side by side (``fedlib.timing``) and the efficiency claims that read it."""
import json

import pytest

from fedlib import results, timing
from fedlib.errors import ConfigError
from fedlib.experiment import make_config


def test_every_method_is_timed_each_repetition_and_the_record_reads_back(tmp_path):
    configs = {m: make_config(method=m, dataset="digits", num_clients=3, rounds=6, local_epochs=1,
                              partition={"name": "dirichlet", "alpha": 0.5}) for m in ("fedavg", "fedprox")}
    said = []
    answer = timing.record("demo", configs, 3, root=tmp_path, progress=said.append)
    assert len(said) == 3 and said[0].startswith("repetition 1/3: fedavg")
    assert said[1].startswith("repetition 2/3: fedavg")   # the order rotates; the line keeps the methods' order
    back = timing.read("demo", tmp_path)
    assert back == json.loads(json.dumps(answer)) and back["repeats"] == 3 and back["device"].startswith("cpu")
    for seconds in back["seconds"].values():
        assert len(seconds["train_s"]) == len(seconds["evaluate_s"]) == 3
        assert all(v > 0 for v in seconds["train_s"] + seconds["evaluate_s"])
        assert seconds["train_s"] == pytest.approx([s + c for s, c in zip(seconds["server_s"], seconds["client_s"])])
        assert all(v > 0 for v in seconds["server_s"] + seconds["client_s"])
    cells = timing.evidence("demo", tmp_path)
    assert [r["seed"] for r in cells["fedprox"]] == [0, 1, 2]
    first = back["seconds"]["fedprox"]
    assert cells["fedprox"][1]["seconds"] == pytest.approx(first["train_s"][1] + first["evaluate_s"][1])
    assert cells["fedprox"][1]["client_seconds"] == first["client_s"][1]
    assert cells["fedprox"][1]["server_seconds"] == first["server_s"][1]
    assert timing.read("nothing", tmp_path) is None and timing.evidence("nothing", tmp_path) == {}


def test_a_timed_round_is_the_engines_round():
    """Timing the server's and the clients' parts apart plays the same round as ``Federation.run_round``: the same
    weights after two rounds."""
    import torch

    from fedlib.experiment import build

    cfg = make_config(method="fedprox", dataset="digits", num_clients=3, rounds=2, local_epochs=1,
                      partition={"name": "dirichlet", "alpha": 0.5})
    played, timed = build(cfg), build(cfg)
    for t in range(2):
        played.run_round(t)
        server_s, client_s = timing.timed_round(timed, t)
        assert server_s > 0 and client_s > 0
    a, b = played.server.state["global"], timed.server.state["global"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("damage", ['{"repeats": 3, "seconds": {"fedavg": {"train_s": [1, 2], "evaluate_s": [1, 2]}}}',
                                    '{"repeats": 1, "seconds": {"fedavg": {"train_s": [-1], "evaluate_s": [0]}}}',
                                    '{"repeats": 1, "seconds": {"fedavg": {"train_s": [1], "evaluate_s": [0], '
                                    '"client_s": [1, 2], "server_s": [0]}}}',
                                    "not json"])
def test_a_damaged_timing_record_is_one_error_naming_it(tmp_path, damage):
    (tmp_path / "demo.json").write_text(damage)
    with pytest.raises(ConfigError, match="demo.json"):
        timing.read("demo", tmp_path)


def fedgpa_outcomes(tmp_path, monkeypatch, fedgpa_over_fedpac: float) -> dict:
    """FedGPA's Table 7 claims on a made-up timing record: FedAvg 100 s a round (+-1 over five repetitions), the
    others 5-40% above it, FedGPA ``fedgpa_over_fedpac`` times FedPAC's round."""
    from fedlib.studies.registry import study

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    jitter = [0.0, 1.0, -1.0, 0.5, -0.5]
    base = {"fedavg": 100, "fedprox": 105, "scaffold": 110, "fedbabu": 106, "fedpac": 120}
    seconds = {m: [v + j for j in jitter] for m, v in base.items()}
    seconds["fedgpa"] = [fedgpa_over_fedpac * v for v in seconds["fedpac"]]
    (tmp_path / "timing").mkdir(parents=True)
    (tmp_path / "timing" / "fedgpa.json").write_text(json.dumps({"repeats": 5, "seconds": {
        m: {"train_s": [0.9 * v for v in s], "evaluate_s": [0.1 * v for v in s]} for m, s in seconds.items()}}))
    found = {a.claim.id: a for a in study("fedgpa").assess("paper", runs={})}
    return {k: found[k] for k in ("fedavg_fastest", "gpa_slightly_above_pac")}


def test_fedgpa_table7_claims_read_the_repetitions_paired(tmp_path, monkeypatch):
    found = fedgpa_outcomes(tmp_path, monkeypatch, 1.02)
    assert found["fedavg_fastest"].outcome == "holds" and len(found["fedavg_fastest"].decision.compared) == 5
    slight = found["gpa_slightly_above_pac"]
    assert slight.outcome == "holds" and slight.looks == 1
    assert slight.decision.compared[0].mean == pytest.approx(2.0)          # +2% on every repetition
    assert slight.decision.compared[1].mean == pytest.approx(10.0 - 2.0)   # within 'slightly' (10%)
    assert fedgpa_outcomes(tmp_path / "b", monkeypatch, 1.15)["gpa_slightly_above_pac"].outcome == "does not hold"


def fedpcl_table1(tmp_path, monkeypatch, scratch_seconds: list[float], parameters: dict | None):
    """FedPCL's Table 1 claim on a made-up timing record: the frozen backbones' round 10 s (+-0.2 over five
    repetitions), from scratch ``scratch_seconds``; ``parameters``: the trained numbers (None: a record made before
    they were counted)."""
    from fedlib.studies import fedpcl
    from fedlib.studies.registry import study

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    frozen = [10.0, 10.2, 9.8, 10.1, 9.9]
    seconds = {fedpcl.SCRATCH: scratch_seconds, fedpcl.FROZEN: frozen}
    (tmp_path / "timing").mkdir(parents=True)
    (tmp_path / "timing" / "fedpcl.json").write_text(json.dumps({"repeats": 5, "seconds": {
        m: {"train_s": [0.8 * v for v in s], "evaluate_s": [0.2 * v for v in s],
            **({"parameters": parameters[m]} if parameters else {})} for m, s in seconds.items()}}))
    return next(a for a in study("fedpcl").assess("paper", runs={}) if a.claim.id == "frozen_backbones_cheaper")


def test_fedpcl_table1_claim_reads_time_and_trained_numbers_paired_by_repetition(tmp_path, monkeypatch):
    """From scratch 15 s against 10 s (+50% every repetition) and 11,000,000 trained numbers against 400,000
    (+2,650%, the same at every repetition: no spread); a record without the counts cannot hold it; from scratch
    at 9 s a round is significantly shorter: it does not hold."""
    from fedlib.studies import fedpcl

    counts = {fedpcl.SCRATCH: 11_000_000, fedpcl.FROZEN: 400_000}
    slower = [15.0, 15.3, 14.7, 15.15, 14.85]
    found = fedpcl_table1(tmp_path / "a", monkeypatch, slower, counts)
    time_above, numbers_above = found.decision.compared
    assert found.outcome == "holds" and time_above.mean == pytest.approx(50.0)
    assert numbers_above.deterministic and numbers_above.mean == pytest.approx(100 * (11_000_000 / 400_000 - 1))
    assert fedpcl_table1(tmp_path / "b", monkeypatch, slower, None).outcome != "holds"
    faster = [9.0, 9.18, 8.82, 9.09, 8.91]
    assert fedpcl_table1(tmp_path / "c", monkeypatch, faster, counts).outcome == "does not hold"


def fedprp_client_side(tmp_path, monkeypatch, fedprp_server: float):
    """FedPRP's Section IV-B4 claim on a made-up timing record: FedAvg's round 10 s in every repetition (server 0.1
    s, clients 9.6 s +- 0.1, evaluation the rest); FedPRP's clients 1 s (+- 0.1) above FedAvg's, 1 s on average, and
    its server part ``fedprp_server`` s."""
    from fedlib.studies.registry import study

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    jitter = [0.0, 0.1, -0.1, 0.05, -0.05]
    clients = {"fedavg": [9.6 + j for j in jitter], "fedprp": [10.6 + j for j in reversed(jitter)]}
    server = {"fedavg": 0.1, "fedprp": fedprp_server}
    (tmp_path / "timing").mkdir(parents=True)
    (tmp_path / "timing" / "fedprp.json").write_text(json.dumps({"repeats": 5, "seconds": {
        m: {"train_s": [server[m] + c for c in clients[m]], "server_s": [server[m]] * 5, "client_s": clients[m],
            "evaluate_s": [10 - server["fedavg"] - c for c in clients["fedavg"]]} for m in clients}}))
    return next(a for a in study("fedprp").assess("paper", runs={}) if a.claim.id == "client_side_cost")


def test_fedprp_client_side_cost_reads_the_rounds_parts_paired_by_repetition(tmp_path, monkeypatch):
    """Hand-computed: FedAvg's round is 10 s in every repetition; FedPRP's server part 0.1 s (0% of FedAvg's round
    above FedAvg's, inside +-1%) and its clients 1 s (10%) above: it holds, the second comparison's mean 10 - 0 = 10.
    With FedPRP's server at 2.1 s (+20%, outside +-1%, and above the clients' +10%) it does not hold."""
    found = fedprp_client_side(tmp_path / "a", monkeypatch, 0.1)
    server, clients_over_server = found.decision.compared
    assert found.outcome == "holds"
    assert server.mean == pytest.approx(0.0) and clients_over_server.mean == pytest.approx(10.0)
    assert fedprp_client_side(tmp_path / "b", monkeypatch, 2.1).outcome == "does not hold"
