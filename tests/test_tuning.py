"""The book's learning rates: chosen on a held-out split of the training images (fedlib.studies.tuning)."""
import pytest
import torch

from fedlib.data import load_dataset
from fedlib.errors import TrainingDiverged
from fedlib.studies import tuning
from fedlib.studies.registry import study


def test_the_held_out_split_is_training_images_only_and_disjoint():
    base, split = load_dataset("fmnist"), load_dataset("fmnist-heldout", size=1000, seed=3)
    assert len(split.test_y) == 1000 and len(split.train_y) == len(base.train_y) - 1000
    # every held-out image is a training image of the base set, none of them is trained on
    flat = base.train_x.flatten(1)
    rows = {hash(r.numpy().tobytes()) for r in flat}
    assert all(hash(r.numpy().tobytes()) in rows for r in split.test_x.flatten(1)[:50])
    test_rows = {hash(r.numpy().tobytes()) for r in split.test_x.flatten(1)}
    assert not test_rows & {hash(r.numpy().tobytes()) for r in split.train_x.flatten(1)[:5000]}
    assert torch.equal(load_dataset("fmnist-heldout", size=1000, seed=3).test_y, split.test_y)


def test_the_best_score_wins_ties_go_to_the_smaller_rate_and_divergence_scores_nothing(tmp_path, monkeypatch):
    scores = {0.01: 0.30, 0.03: 0.50, 0.05: 0.50, 0.1: None}
    seen = []

    def fake_run(cfg, progress=True):
        seen.append((cfg.dataset, cfg.lr))
        if scores[cfg.lr] is None:
            raise TrainingDiverged("loss became nan")
        return {"final": {"acc_global": scores[cfg.lr]}}

    monkeypatch.setattr("fedlib.experiment.runner.run", fake_run)
    answer = tuning.tune(study("pfedcspc"), root=tmp_path, progress=False)
    assert answer["chosen"] == 0.03
    assert answer["scores"] == {"0.01": 0.30, "0.03": 0.50, "0.05": 0.50, "0.1": None}
    assert {d for d, _ in seen} == {"fmnist-heldout"} and [lr for _, lr in seen] == list(tuning.GRID)
    assert tuning.read("pfedcspc", tmp_path) == answer
    assert "0.1: diverged" in tuning.summary(answer)


def test_tune_refuses_unknown_chapters_and_bad_rates_in_one_line(capsys):
    from fedlib.cli import main

    assert main(["tune", "fedavg"]) == 2
    assert "chapter='fedavg' is not allowed" in capsys.readouterr().err
    assert main(["tune", "fedmate", "--lrs", "-1"]) == 2
    assert "--lrs=-1.0 is not allowed: learning rates in [1e-6, 10]" in capsys.readouterr().err
    assert main(["tune", "fedmate", "--lrs", "1e-320"]) == 2
    assert "--lrs=1e-320 is not allowed: learning rates in [1e-6, 10]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune"])


@pytest.mark.parametrize("content", ["{trunc", "[]", '{"chosen": "abc", "scores": {}}', '{"chosen": -1, "scores": {}}'])
def test_a_damaged_tuning_record_is_one_line_naming_the_file_and_the_restore(tmp_path, content):
    from fedlib.errors import ConfigError
    from fedlib.studies import tuning

    (tmp_path / "fedmate.json").write_text(content)
    with pytest.raises(ConfigError, match=r"tuning record .*fedmate.json.*git checkout fedmate.json.*fedlib tune "
                                          r"fedmate"):
        tuning.read("fedmate", tmp_path)


def test_tune_writes_nothing_when_no_rate_trains_above_twice_chance(tmp_path, monkeypatch):
    from fedlib.errors import ConfigError
    from fedlib.studies import tuning

    monkeypatch.setattr("fedlib.experiment.runner.run", lambda cfg, progress=True: {"final": {"a_loc": 0.11}})
    with pytest.raises(ConfigError, match=r"above twice chance \(the best, 0.01, reached 11.0%: nothing is written"):
        tuning.tune(study("fedprp"), grid=(0.01, 0.02), root=tmp_path, progress=False)
    assert not list(tmp_path.iterdir())
