"""No file fedlib reads runs code: a crafted pickle in a checkpoint, a client shard, a trained model, cached
backbone features, a Flower node's state folder or a CIFAR data file is refused (named, moved aside and
recomputed where fedlib made the file), and the command it carries never runs."""
import pickle
import time

import numpy as np
import pytest
import torch

from fedlib import serial
from fedlib.errors import DataNotFoundError
from fedlib.experiment import build, make_config, run, trained

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=3,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05)


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the file appears if anything unpickles it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path, marker) -> None:
    torch.save({"model": Payload(marker)}, path)   # what torch.load(weights_only=False) would run


def test_the_tree_format_round_trips_what_checkpoints_hold(tmp_path):
    value = {"global": {"w": torch.arange(6.0).view(2, 3)}, 3: [np.array([[1, 2]], dtype=np.int64), (1.5, None)],
             "nan": float("nan"), "flag": True, "name": "x", (0, 1): {"weights": np.eye(2)}}
    serial.save(value, tmp_path / "v.pt")
    back = serial.load(tmp_path / "v.pt")
    assert torch.equal(back["global"]["w"], value["global"]["w"]) and back[3][1] == (1.5, None)
    assert isinstance(back[3][0], np.ndarray) and back[3][0].dtype == np.int64 and back[3][0].tolist() == [[1, 2]]
    assert np.isnan(back["nan"]) and back["flag"] is True and np.array_equal(back[(0, 1)]["weights"], np.eye(2))
    with pytest.raises(serial.UnsendableValue, match=r"value\['s'\] is a set"):
        serial.save({"s": {1}}, tmp_path / "bad.pt")


def test_a_crafted_pickle_is_not_a_tree_file_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    plant(tmp_path / "evil.pt", marker)
    with pytest.raises(ValueError, match="not a fedlib tree file"):
        serial.load(tmp_path / "evil.pt")
    assert not marker.exists()


def test_a_crafted_checkpoint_runs_nothing_and_the_run_starts_again(tmp_path, capsys):
    cfg = make_config(method="fedavg", **DIGITS)
    marker = tmp_path / "ran"
    plant(tmp_path / f"{cfg.key()}.ckpt", marker)
    record = run(cfg, cache_dir=tmp_path, progress=False)
    assert not marker.exists()
    assert not record["resumed"] and len(record["history"]) == 2
    assert len(list(tmp_path.glob(f"{cfg.key()}.ckpt.corrupt-*"))) == 1
    said = capsys.readouterr()
    assert f"checkpoint {tmp_path / (cfg.key() + '.ckpt')} could not be read" in said.out + said.err


def test_a_crafted_client_shard_runs_nothing_and_the_run_starts_again(tmp_path):
    cfg = make_config(method="scaffold", **DIGITS)
    checkpoint = tmp_path / "run.ckpt"
    first = build(cfg, checkpoint=checkpoint, progress=False)
    first.end_round(0, first.run_round(0), time.perf_counter())   # one round checkpointed
    shard = next((tmp_path / "run.ckpt.d").glob("c1-*.pt"))
    marker = tmp_path / "ran"
    plant(shard, marker)
    again = build(cfg, checkpoint=checkpoint, progress=False)
    history = again.run()
    assert not marker.exists()
    assert again.start_round == 0 and len(history) == 2
    clean = build(cfg, progress=False)
    clean.run()
    assert history[-1]["personal_local_acc"] == clean.history[-1]["personal_local_acc"]


def test_a_crafted_trained_model_runs_nothing_and_is_retrained(tmp_path):
    cfg = make_config(method="fedavg", **DIGITS)
    marker = tmp_path / "ran"
    plant(tmp_path / f"{cfg.key()}.model", marker)
    fed = trained(cfg, cache_dir=tmp_path)
    assert not marker.exists() and len(fed.history) == 2
    again = trained(cfg, cache_dir=tmp_path)   # the retrained model is read back, nothing trains
    assert again.start_round == 2 and again.history == fed.history


def test_crafted_cached_features_run_nothing_and_are_recomputed(tmp_path):
    from fedlib.backbones import extract

    images = torch.rand(4, 1, 28, 28)
    first = extract("cnn_mnist", images, cache_dir=tmp_path)
    (path,) = (tmp_path / "features").glob("*.pt")
    marker = tmp_path / "ran"
    plant(path, marker)
    again = extract("cnn_mnist", images, cache_dir=tmp_path)
    assert not marker.exists() and torch.allclose(again, first)
    assert len(list((tmp_path / "features").glob("*.corrupt-*"))) == 1


def test_a_crafted_cifar_batch_runs_nothing_and_names_the_file(tmp_path, monkeypatch):
    from fedlib.data import sources

    monkeypatch.setenv("FEDLIB_DATA", str(tmp_path))
    sources._load_cached.cache_clear()
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": list(range(4))}
        pickle.dump(batch, open(folder / name, "wb"))
    marker = tmp_path / "ran"
    pickle.dump({b"data": Payload(marker), b"labels": [0]}, open(folder / "data_batch_3", "wb"))
    with pytest.raises(DataNotFoundError, match=r"data_batch_3 is not a CIFAR python batch \(it names io.open"):
        sources.load_dataset("cifar10")
    assert not marker.exists()
    sources._load_cached.cache_clear()
