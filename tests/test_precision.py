"""Mixed precision is an explicit opt-in: fp32 by default (and out of the cache key there), bf16 refused where
the processor has no bf16 instructions, named in every record, and a bf16 run trains to the fp32 run's level."""
import numpy as np
import pytest

from fedlib.engine import training
from fedlib.errors import ConfigError
from fedlib.experiment import make_config, run, validate

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=3, local_epochs=1, batch_size=32, lr=0.05)


def test_fp32_keeps_every_existing_key_and_other_precisions_get_their_own():
    plain = make_config(method="fedavg", **DIGITS)
    assert make_config(method="fedavg", precision="fp32", **DIGITS).key() == plain.key()
    assert make_config(method="fedavg", precision="bf16", **DIGITS).key() != plain.key()


def test_bf16_is_refused_in_one_line_on_a_processor_without_bf16_instructions(monkeypatch):
    monkeypatch.setattr(training, "cpu_has_bf16", lambda: False)
    with pytest.raises(ConfigError, match=r"precision='bf16' is not allowed: 'fp32' on this processor \(.*\): it has "
                                          r"no bf16 instructions"):
        validate(make_config(method="fedavg", precision="bf16", **DIGITS))
    with pytest.raises(ConfigError, match=r"precision='tf32' is not allowed: 'fp32' or 'bf16' on the CPU"):
        validate(make_config(method="fedavg", precision="tf32", **DIGITS))
    with pytest.raises(ConfigError, match=r"precision='fp16' is not allowed: one of fp32, bf16, tf32"):
        validate(make_config(method="fedavg", precision="fp16", **DIGITS))
    monkeypatch.setattr(training, "cpu_has_bf16", lambda: True)
    validate(make_config(method="fedavg", precision="bf16", **DIGITS))


def test_the_processor_flags_decide_bf16(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open
    for flags, expected in (("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", True), ("amx_bf16 sse", True)):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda p, *a, _c=cpuinfo, **k: real_open(_c if p == "/proc/cpuinfo"
                                                                                         else p, *a, **k))
        assert training.cpu_has_bf16() is expected


@pytest.mark.slow
def test_a_bf16_run_trains_within_the_spread_of_fp32_runs_and_says_so(monkeypatch):
    """bf16 autocast, fp32 master weights: three seeds each; the mean final accuracy of bf16 lies within two
    standard deviations of the fp32 seeds (or 3 points) of fp32's, and every record names its precision. Where the
    CPU lacks bf16 PyTorch emulates it (slowly: this config is tiny)."""
    monkeypatch.setattr(training, "cpu_has_bf16", lambda: True)
    acc = {}
    for precision in ("fp32", "bf16"):
        records = [run(make_config(method="fedavg", precision=precision, seed=s, **{**DIGITS, "rounds": 10, "lr": 0.2}),
                       cache_dir=None, progress=False) for s in range(3)]
        assert {r["precision"] for r in records} == {precision}
        acc[precision] = [r["final"]["personal_local_acc"] for r in records]
    assert np.mean(acc["fp32"]) > 0.8   # it trains
    assert abs(np.mean(acc["bf16"]) - np.mean(acc["fp32"])) <= max(2 * np.std(acc["fp32"]), 0.03)
    assert acc["bf16"] != acc["fp32"]   # bf16 did change the arithmetic
