"""Many runs in one batched step (fedlib.engine.lockstep, experiment.run_many): every run's record equals
the one its solo run writes with the batched executor; runs of other lengths, runs that diverge and runs
interrupted and resumed leave the others as they are."""
import dataclasses

import pytest
import torch

from fedlib.engine.lockstep import Lockstep
from fedlib.errors import TrainingDiverged
from fedlib.experiment import lockstep_groups, make_config, run, run_many
from fedlib.methods import METHODS
from fedlib.methods.fedavg import FedAvg

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05, seed=1, executor="batched")
# FedPRP at lr 0.05 (and its default 5 + 25 epochs a round) is chaotic here: the rounding differences between a
# solo and a lockstep step (below) grow to 1e-3 in a round; at lr 0.01 they stay at 1e-7
OVERRIDES = {"fedprp": {"lr": 0.01, "hyper": {"head_epochs": 1, "body_epochs": 1}},
             "pfedcspc": {"hyper": {"server_epochs": 2}, "momentum": 0.9, "metrics": ["generalization"]}}
# bitwise where a solo step and a lockstep step run the same kernels; FedPAC and FedPRP read tensors that every
# client of a run shares (global prototypes, FedPRP's frozen global body in its head phase): one tensor for
# the whole vmap in a solo step, stacked across runs in a lockstep step (another kernel, other rounding)
ROUNDING = {"fedpac", "fedprp"}


def trio(method: str):
    """Two runs of two rounds (seeds 1, 2) and one of one round on another partition."""
    base = {**DIGITS, **OVERRIDES.get(method, {})}
    return [make_config(method=method, **{**base, "seed": 1}),
            make_config(method=method, **{**base, "seed": 2}),
            make_config(method=method, **{**base, "seed": 3, "rounds": 1,
                                          "partition": {"name": "dirichlet", "alpha": 0.5, "min_size": 20}})]


def same_history(solo: dict, batched: dict, exact: bool) -> None:
    assert len(solo["history"]) == len(batched["history"])
    for a, b in zip(solo["history"], batched["history"]):
        for key, value in a.items():
            if key == "elapsed_s":
                continue
            if exact or not isinstance(value, float):
                assert b[key] == value, (a["round"], key)
            else:
                tol = 1e-5 if "loss" in key else 0.02   # a test sample or two
                assert abs(b[key] - value) <= tol, (a["round"], key, value, b[key])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fedavg", "fedprox", "scaffold", "fedproto", "fedpac", "fedgpa", "fedprp",
                                    "fedmate", "pfedcspc"])
def test_run_batched_records_equal_solo_records(method, tmp_path):
    cfgs = trio(method)
    many = run_many(cfgs, cache_dir=tmp_path, progress=False)
    for cfg, record in zip(cfgs, many):
        assert isinstance(record, dict), record
        assert record["runs_batched"] == 3 and record["executor"] == "batched"
        assert (tmp_path / f"{cfg.key()}.json").exists() and not (tmp_path / f"{cfg.key()}.ckpt").exists()
        same_history(run(cfg, cache_dir=None, progress=False), record, exact=method not in ROUNDING)


class Poisoned(FedAvg):
    """FedAvg whose loss becomes NaN in round 2 of the run with seed 2 (the server sends NaN there)."""
    name = "poisoned"

    def broadcast(self, server, client_id):
        bad = server.seed == 2 and server.round >= 1
        return {**super().broadcast(server, client_id), "poison": torch.tensor(float("nan") if bad else 0.0)}

    def local_loss(self, out, batch, params, ctx):
        return super().local_loss(out, batch, params, ctx) + ctx.received["poison"]


def test_a_diverging_run_leaves_the_batch_without_disturbing_the_others(tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "poisoned", Poisoned)
    cfgs = [dataclasses.replace(c, method="poisoned") for c in trio("fedavg")]
    many = run_many(cfgs, cache_dir=tmp_path, progress=False)
    assert isinstance(many[1], TrainingDiverged) and "round 2" in str(many[1])
    assert not (tmp_path / f"{cfgs[1].key()}.json").exists()
    for i in (0, 2):
        same_history(run(cfgs[i], cache_dir=None, progress=False), many[i], exact=True)


def test_an_interrupted_group_resumes_to_the_same_records(tmp_path, monkeypatch):
    cfgs = trio("fedproto")
    steps = {"n": 0}
    original = Lockstep.step

    def interrupted(self, *args, **kwargs):
        if steps["n"] == 1:
            raise KeyboardInterrupt
        steps["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Lockstep, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_many(cfgs, cache_dir=tmp_path, progress=False)
    # the one-round run finished and wrote its record; the others stopped inside round 2
    assert all((tmp_path / f"{c.key()}.ckpt").exists() for c in cfgs[:2])
    assert (tmp_path / f"{cfgs[2].key()}.json").exists()
    monkeypatch.setattr(Lockstep, "step", original)
    resumed = run_many(cfgs, cache_dir=tmp_path, progress=False)
    assert [r["resumed"] for r in resumed] == [True, True, False]
    for cfg, record in zip(cfgs, resumed):
        same_history(run(cfg, cache_dir=None, progress=False), record, exact=True)


def test_nothing_starts_past_the_deadline_and_finished_records_are_read_back(tmp_path):
    import time

    cfgs = trio("fedavg")
    assert run_many(cfgs, cache_dir=tmp_path, progress=False, deadline=time.time() - 1) == [None] * 3
    first = run_many(cfgs[:1], cache_dir=tmp_path, progress=False)
    seen = []
    again = run_many(cfgs[:1], cache_dir=tmp_path, progress=False, on_record=lambda c, r: seen.append(c.seed))
    assert again == first and seen == [1]


def test_groups_share_everything_but_per_run_fields():
    a, b, c = trio("fedavg")
    other_lr = dataclasses.replace(a, lr=0.1)
    other_hyper = make_config(method="fedprox", hyper={"mu": 0.5}, **DIGITS)
    default_hyper = make_config(method="fedprox", **DIGITS)
    groups = lockstep_groups([a, other_lr, b, other_hyper, c, default_hyper], max_runs=2)
    assert groups == [[0, 2], [4], [1], [3], [5]]
