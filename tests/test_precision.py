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


def test_records_records_another_precision_under_keys_of_its_own(capsys, monkeypatch, tmp_path):
    """`records --precision bf16` queues the same grid in bf16: new keys (the fp32 records never stand in for
    them), the headline table only with --tables; refused in one line where the processor has no bf16."""
    from fedlib import results
    from fedlib.cli import main
    from fedlib.recording import recording_order
    from fedlib.studies import fedgpa

    tables = fedgpa.tables("reference")
    fp32, bf16 = recording_order(tables, only=["headline"]), recording_order(tables, only=["headline"],
                                                                              precision="bf16")
    assert len(fp32) == len(bf16) == 10 * 2 * 5   # ten methods, s in {20, 80}, five seeds: Setting 1 only
    assert {c.precision for c in bf16} == {"bf16"} and not {c.key() for c in fp32} & {c.key() for c in bf16}
    assert {c.key() for c in fp32} <= {c.key() for c in recording_order(tables)}   # inside the comparison
    assert len(recording_order(tables)) == len(recording_order({k: v for k, v in tables.items() if k != "headline"}))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(training, "cpu_has_bf16", lambda: True)
    argv = ["records", "fedgpa", "--scale", "reference", "--precision", "bf16", "--tables", "headline", "--device",
            "cpu", "--deadline", "1e-9"]
    assert main(argv) == 0
    assert "fedgpa at scale reference: 100 configs, 0 already recorded, 100 to run" in capsys.readouterr().out
    monkeypatch.setattr(training, "cpu_has_bf16", lambda: False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "precision='bf16' is not allowed" in err and "Traceback" not in err


def _write(cfg, acc, root):
    from fedlib import results

    row = {"round": cfg.rounds, "personal_local_acc": acc}
    results.write({"config": cfg.flat(), "key": cfg.key(), "seed": cfg.seed, "scale": "reference",
                   "precision": cfg.precision, "history": [row], "final": row}, "fedgpa", root)


def test_a_precision_check_pairs_runs_by_seed_and_compares_with_the_seed_spread(monkeypatch, tmp_path):
    """Hand-made records: fp32 80/82/84 % over seeds 0-2 (population std 1.63 points) and bf16 81/82/83: paired
    differences +1, 0, -1 (mean 0, within the spread, 95% CI 0 -/+ 4.303 x 1/sqrt(3) = [-2.48, +2.48]); a second
    cell with bf16 3 points lower on every seed is outside it (an interval of width 0). A cell without bf16
    records is left out."""
    from fedlib import results
    from fedlib.studies.precision import (
        cell_differences,
        difference_rows,
        difference_summary,
        in_precision,
        recorded_pair,
    )

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    base = make_config(method="fedavg", **DIGITS)
    grid = {"a": [base.__class__(**{**base.__dict__, "seed": s}) for s in range(3)],
            "b": [base.__class__(**{**base.__dict__, "seed": s, "lr": 0.1}) for s in range(3)],
            "c": [base.__class__(**{**base.__dict__, "seed": s, "lr": 0.2}) for s in range(3)]}
    other = in_precision(grid, "bf16")
    for s in range(3):
        _write(grid["a"][s], (80 + 2 * s) / 100, tmp_path)
        _write(other["a"][s], (81 + s) / 100, tmp_path)
        _write(grid["b"][s], (80 + 2 * s) / 100, tmp_path)
        _write(other["b"][s], (77 + 2 * s) / 100, tmp_path)
        _write(grid["c"][s], 0.5, tmp_path)
    cells = cell_differences(recorded_pair("fedgpa", grid, "bf16"), "personal_local_acc")
    assert [c.cell for c in cells] == ["a", "b"]
    assert cells[0].differences == pytest.approx({0: 1.0, 1: 0.0, 2: -1.0})
    rows = difference_rows(cells, "personal_local_acc", lambda cell: {"cell": cell})
    assert rows[0]["bf16 - fp32"] == 0.0 and rows[0]["fp32 std"] == 1.63 and rows[0]["within"] == "yes"
    assert str(rows[0]["95% CI"]) == "[-2.48, +2.48]" and rows[0]["95% CI"].high == pytest.approx(2.4841, abs=1e-4)
    assert rows[1]["bf16 - fp32"] == -3.0 and rows[1]["within"] == "no" and str(rows[1]["95% CI"]) == "[-3.00, -3.00]"
    summary = difference_summary(cells, "personal_local_acc", lambda cell: {"cell": cell})
    assert summary.startswith("1 of 2 cells: |bf16 - fp32| within the fp32 std over seeds; largest mean difference "
                              "-3.00 points (cell=b, fp32 std 1.63)")
    assert "over all 6 paired runs (seeds 0, 1, 2) the mean difference is -1.50 points" in summary


def test_fedgpa_reads_the_same_conclusions_from_both_precisions_when_they_agree(monkeypatch, tmp_path):
    """Table 2 complete in fp32 (seeds 0-4) and in bf16 at seeds 0-2 (FedGPA one point ahead of every method on every
    seed in both): the check reads the bf16 seeds alone in both precisions, and the five claims the table decides
    have the same outcome; before the bf16 records exist nothing is compared."""
    from fedlib import results
    from fedlib.recording import recording_order
    from fedlib.studies import fedgpa, fedgpa_pages

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    tables = fedgpa.tables("reference")
    for cfg in recording_order(tables, only=["headline"]):
        _write(cfg, 0.80 + (0.01 if cfg.method == "fedgpa" else 0.0) + 0.002 * cfg.seed, tmp_path)
    assert fedgpa_pages.precision_check()[0] == [] and fedgpa_pages.precision_check()[3] == []
    assert fedgpa.SCALES["reference"].seeds == [0, 1, 2, 3, 4]
    for cfg in recording_order(tables, only=["headline"], precision="bf16", seeds=[0, 1, 2]):
        _write(cfg, 0.80 + (0.01 if cfg.method == "fedgpa" else 0.0) + 0.002 * cfg.seed + 0.0005, tmp_path)
    rows, records, summary, conclusions = fedgpa_pages.precision_check()
    assert len(rows) == 20 and len(records) == 120 and {r["bf16 - fp32"] for r in rows} == {0.05}
    assert summary.startswith("20 of 20 cells")
    assert conclusions and all(r["same outcome"] == "yes" for r in conclusions)
    assert conclusions[0]["claim"].startswith("FedGPA has the highest accuracy") and "holds" in conclusions[0]["bf16"]
