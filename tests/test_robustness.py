"""Bad inputs are one-line errors before any training; concurrent runs share a cache safely; damaged cache
entries and data files are named and recovered from; checkpoints of many clients stay small."""
import contextlib
import dataclasses
import gzip
import json
import multiprocessing
import re

import numpy as np
import pytest
import torch

import fedlib.experiment as experiment
from fedlib import serial
from fedlib.cli import book_builder, main
from fedlib.data.partition import dirichlet
from fedlib.data.sources import load_dataset
from fedlib.errors import ConfigError, DataNotFoundError, TrainingDiverged
from fedlib.experiment import build, make_config, run

BASE = ["run", "--dataset", "digits", "--partition", "dirichlet", "alpha=0.5", "--clients", "4", "--budget", "smoke",
        "--no-progress"]
DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 0.5}, num_clients=4, rounds=2,
              local_epochs=1, batch_size=32, lr=0.05)


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if a Federation starts training."""
    from fedlib.engine.loop import Federation

    def refuse(self, t):
        raise AssertionError("training started before the bad input was refused")

    monkeypatch.setattr(Federation, "run_round", refuse)


# (arguments, what the one error line must name)
BAD = [
    (["--method", "fedgpa", "--hp", "mu=abc"], "hyper.mu='abc' is not allowed: a finite number"),
    (["--method", "fedgpa", "--hp", "mu=[1,2]"], "hyper.mu=[1, 2] is not allowed: a finite number"),
    (["--set", "momentum=abc"], "momentum='abc' is not allowed: a finite number"),
    (["--set", "weight_decay=abc"], "weight_decay='abc'"),
    (["--partition", "skew", "setting=1", "n=abc"], "partition.n='abc' is not allowed: an integer or a list"),
    (["--partition", "dirichlet", "alpha=abc"], "partition.alpha='abc' is not allowed: a finite number"),
    (["--partition", "dirichlet", "alpha=0.5", "repeat=abc"], "partition.repeat='abc'"),
    (["--partition", "dirichlet", "alpha=0.5", "server=1.5"], "partition.server=1.5 is not allowed: an integer"),
    (["--seeds", "-1"], "seed=-1 is not allowed: an integer in [0, 2**32 - 1]"),
    (["--seeds", "4294967296"], "seed=4294967296 is not allowed"),
    (["--seeds", "0", "-3"], "seed=-3"),   # a later seed is refused before the first one trains
    (["--set", "lr=Infinity"], "lr=inf is not allowed: a finite number"),
    (["--set", "lr=NaN"], "lr=nan is not allowed: a finite number"),
    (["--method", "fedgpa", "--hp", "lga=maybe"], "hyper.lga='maybe' is not allowed: true or false"),
    (["--method", "fedproto", "--hp", "lam=true"], "hyper.lam=True is not allowed: a finite number"),
    (["--set", "batch_size=true"], "batch_size=True is not allowed: an integer"),
    (["--set", "global_test_size=0"], "global_test_size=0 is not allowed"),
    (["--set", "global_test_size=-5"], "global_test_size=-5 is not allowed"),
    (["--set", "rounds=1.5"], "rounds=1.5 is not allowed: an integer"),
    (["--set", "eval_finetune_epochs=1.5"], "eval_finetune_epochs=1.5 is not allowed: an integer"),
    (["--set", "data_options=3"], "data_options=3 is not allowed: a mapping"),
    (["--set", "model=3"], "model=3 is not allowed: a string or None"),
    (["--set", "seed=3"], "--set seed=3 is not allowed: a config field other than seed: use --seeds"),
    (["--set", "hyper={}"], "--set hyper={} is not allowed: a config field other than hyper: use --hp"),
    (["--set", "method=fedavg"], "use --method"),
    (["--method", "fedavg", "fedgpa", "--hp", "nosuch=1"], "hyper.nosuch=1 is not allowed: a hyperparameter of at "
                                                           "least one of fedavg, fedgpa"),
    (["--engine", "ray"], "engine='ray' is not allowed: one of inprocess, flower"),
    # issue 27: names, types, ranges and fields that contradict each other, all refused before training
    (["--partition", "dirichlet", "alpha=0.5", "test_fraction=abc"], "partition.test_fraction='abc' is not allowed"),
    (["--partition", "dirichlet", "alpha=0.5", "test_fraction=true"], "partition.test_fraction=True is not allowed"),
    (["--partition", "dirichlet", "alpha=0.5", "test_fraction=0"], "partition.test_fraction=0 is not allowed"),
    (["--set", 'data_options={"bogus": 1}'], "data_options.bogus=1 is not allowed: no option: digits is read from"),
    (["--dataset", "digit4", "--partition", "domains", "--set", 'data_options={"bogus": 1}'],
     "data_options.bogus=1 is not allowed: an option of digit4: n_train, n_test, seed"),
    (["--dataset", "digit4", "--partition", "domains", "--set", 'data_options={"n_train": "abc"}'],
     "data_options.n_train='abc' is not allowed: an integer"),
    (["--seeds", "0", "0"], "--seeds=[0, 0] is not allowed: distinct seeds (0 given twice)"),
    (["--set", "num_clients=6"], "--set num_clients=6 is not allowed: a config field other than num_clients: use "
                                 "--clients"),
    (["--set", "dataset=mnist"], "use --dataset"),
    (["--set", "global_test_size=100000"], "global_test_size=100000 is not allowed: at most the 540 test samples"),
    (["--method", "fedmate", "--hp", "d_hidden=100000000000"], "hyper.d_hidden=100000000000 is not allowed: a value "
                                                                "whose tensors fit in memory: it needs 35,762.8 GiB"),
    (["--method", "ccvr", "--hp", "virtual=1000000000000"], "hyper.virtual=1000000000000 is not allowed"),
    (["--method", "creff", "--hp", "num_features=10000000000"], "hyper.num_features=10000000000 is not allowed"),
    (["--method", "fedsoup", "--hp", "pool=100000000"], "hyper.pool=100000000 is not allowed"),
    (["--out", "/tmp/" + "x" * 300 + ".json"], "is not allowed: a file fedlib can write (File name too long)"),
    # issue 39: groups given as scalars, booleans as numbers, an unbounded redraw count
    (["--set", "participation=5"], "participation=5 is not allowed: a mapping of its fields (fraction, "),
    (["--set", "evaluation=abc"], "evaluation='abc' is not allowed: a mapping of its fields (every, "),
    (["--method", "pfedcspc", "--hp", "lambdas=[true, false]"], "hyper.lambdas=[True, False] is not allowed"),
    (["--partition", "dirichlet", "alpha=0.5", "max_tries=1000000000"], "max_tries=1000000000 is not allowed"),
    (["--set", "precision=fp16"], "precision='fp16' is not allowed: one of fp32, bf16, tf32"),
    (["--engine", "flower", "--executor", "process"], "executor='process' is not allowed: 'sequential' with engine "
                                                      "'flower'"),
    # issue 67: command-line leftovers
    (["--set", "lr=-1", "lr=0.05"], "--set lr='lr=0.05' is not allowed: each key once"),   # not only the last
    (["--set", "lr=1e-320"], "lr=1e-320 is not allowed: a positive number float32 can hold"),   # 0 in float32
    (["--out", ""], "--out='' is not allowed: a file path"),
    (["--out", "nodir/"], "--out='nodir/' is not allowed: a file path"),   # it wrote a file named nodir
    (["--partition", "dirichlet", "alpha=0.5", "test_fraction=1e-9"],   # every client got one test image
     "partition.test_fraction=1e-09 is not allowed: a ratio of local test to train size in [0.01, 10]"),
    (["--method", "pfedcspc", "--hp", "lambdas=[Infinity, 1]"], "hyper.lambdas=[inf, 1] is not allowed"),
]


@pytest.mark.parametrize("args, names", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_before_training(args, names, capsys, tmp_path, no_training):
    assert main([*BASE, "--cache", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert names in err[0]
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.ckpt"))


@pytest.mark.parametrize("args, field, value", [
    (["--set", "lr=.05"], "lr", 0.05), (["--set", "lr=+0.05"], "lr", 0.05), (["--set", "rounds=+1"], "rounds", 1),
    (["--device", "cpu:0"], "device", "cpu"),   # the one CPU device: the same config (and record) as 'cpu'
])
def test_numbers_as_python_writes_them_and_cpu_0_are_accepted(args, field, value, monkeypatch, tmp_path):
    """``.05``, ``+0.05`` and ``cpu:0`` were refused; they are the values Python and torch read them as."""
    from fedlib import experiment as exp

    seen = []
    monkeypatch.setattr(exp, "run", lambda cfg, **kw: seen.append(cfg) or (_ for _ in ()).throw(KeyboardInterrupt))
    assert main([*BASE, "--cache", str(tmp_path), *args]) == 130
    assert getattr(seen[0], field) == value


def test_a_folder_variable_starting_with_a_tilde_is_under_home(tmp_path, monkeypatch):
    """FEDLIB_CACHE='~/fc' made a folder named '~' in the current folder; a shell would have expanded it."""
    from fedlib.store import env_folder

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FEDLIB_CACHE", "~/fc")
    assert env_folder("FEDLIB_CACHE", tmp_path / "default") == tmp_path / "fc"
    monkeypatch.delenv("FEDLIB_CACHE")
    assert env_folder("FEDLIB_CACHE", tmp_path / "default") == tmp_path / "default"


def test_a_terminal_that_cannot_show_plus_minus_gets_the_table(tmp_path):
    """PYTHONIOENCODING=ascii ended in a UnicodeEncodeError at the table's '±' after training."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONIOENCODING": "ascii", "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, "-m", "fedlib", *BASE, "--cache", str(tmp_path), "--set", "rounds=1"],
                          env=env, capture_output=True, text=True, encoding="ascii", errors="replace", timeout=300)
    assert done.returncode == 0, done.stderr
    assert "mean ? std over seeds" in done.stdout and "fedavg" in done.stdout


def test_run_many_given_one_config_twice_trains_it_once_and_returns_it_at_both_places(tmp_path):
    """It returned [record, None]: the second copy met the first one's lock in the same process."""
    from fedlib.experiment import run_many

    cfg = make_config(method="fedavg", **{**DIGITS, "rounds": 1})
    out = run_many([cfg, cfg], cache_dir=tmp_path, progress=False)
    assert out[0] is out[1] and out[0]["seed"] == cfg.seed
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_two_runs_in_two_threads_of_one_process_give_each_seeds_own_result(monkeypatch):
    """Every run seeds the process-wide generators before its model's initial weights are drawn: a second thread
    seeding in between gave the first run the second seed's weights. The seeding and the draw are one step now;
    the probe widens the window with a pause after the seeding."""
    import threading
    import time

    from fedlib.experiment import wiring
    from fedlib.models import build_model

    def result(cfg):   # the last round's metrics, without its clock
        return {k: v for k, v in run(cfg, cache_dir=None, progress=False)["final"].items() if k != "elapsed_s"}

    cfgs = [make_config(method="fedavg", seed=seed, **{**DIGITS, "rounds": 1}) for seed in (0, 1)]
    alone = [result(cfg) for cfg in cfgs]

    def slow_build(*args, **kwargs):
        time.sleep(0.3)   # the other thread seeds now, if it can
        return build_model(*args, **kwargs)

    monkeypatch.setattr("fedlib.models.build_model", slow_build)
    together: list = [None, None]
    threads = [threading.Thread(target=lambda i=i: together.__setitem__(i, result(cfgs[i]))) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    assert wiring.SEEDED.acquire(blocking=False)   # released after each build
    wiring.SEEDED.release()


def test_numpy_scalars_through_the_python_api_are_the_numbers_they_hold():
    """np.float32(0.02) is a learning rate like 0.02 (it was refused as 'not a positive number'), with the key of
    the Python number it holds."""
    cfg = make_config(method="fedavg", **{**DIGITS, "lr": np.float32(0.02), "rounds": np.int64(2)})
    experiment.validate(cfg)
    assert cfg.key() == make_config(method="fedavg", **{**DIGITS, "lr": float(np.float32(0.02))}).key()


def test_an_integer_hyperparameter_given_as_a_fraction_is_refused():
    from fedlib.methods import METHODS, make_method

    integer = [(m, f.name) for m, cls in METHODS.items() for f in dataclasses.fields(cls.Hyper)
               if f.type in (int, "int")]
    assert integer, "some method has an integer hyperparameter"
    for method, name in integer:
        with pytest.raises(ConfigError, match=rf"hyper\.{name}=1\.5 is not allowed: an integer"):
            make_method(method, **{name: 1.5})


def test_every_declared_hyperparameter_range_admits_its_edges_and_refuses_beyond_them():
    """A method's hyperparameters declare once where they may lie (``hyper(default, check)``) and one checker
    applies every declaration (30 ``validate`` bodies did it before, each its own way): the defaults pass, a range's
    closed ends pass and its open end and the values past it are refused, every named choice passes and another is
    refused, None passes where the type allows it."""
    import typing

    from fedlib.methods import METHODS, make_method
    from fedlib.methods.base import Bounds

    def refused(method, name, value, says):
        with pytest.raises(ConfigError, match=rf"hyper\.{name}=.* is not allowed: {re.escape(says)}"):
            make_method(method, **{name: value})

    tried = 0
    for method, cls in METHODS.items():
        make_method(method)
        hints = typing.get_type_hints(cls.Hyper)
        for f in dataclasses.fields(cls.Hyper):
            check, number = f.metadata.get("check"), (float if hints[f.name] is not int else int)
            if isinstance(check, Bounds):
                low, step = number(check.low), number(1)
                if check.low_open:
                    refused(method, f.name, low, check.says)
                else:
                    make_method(method, **{f.name: low})
                refused(method, f.name, low - step, check.says)
                if check.high is not None:
                    make_method(method, **{f.name: number(check.high)})
                    refused(method, f.name, number(check.high) + step, check.says)
                if type(None) in typing.get_args(hints[f.name]):
                    make_method(method, **{f.name: None})
                tried += 1
            elif isinstance(check, tuple):
                for choice in check:
                    make_method(method, **{f.name: choice})
                refused(method, f.name, "no-such-choice", f"one of {', '.join(check)}")
                tried += 1
    assert tried >= 100, tried


def test_unwritable_cache_or_out_is_refused_before_training(tmp_path, capsys, no_training):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main([*BASE, "--cache", str(blocker / "cache")]) == 2
    assert "--cache=" in capsys.readouterr().err
    assert main([*BASE, "--cache", "none", "--out", str(blocker / "out.json")]) == 2
    assert "--out=" in capsys.readouterr().err
    assert main([*BASE, "--cache", "none", "--out", str(tmp_path)]) == 2
    assert "a file path (this is a folder)" in capsys.readouterr().err


def test_run_refuses_an_unwritable_cache_before_training(tmp_path, no_training):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cache_dir=.* is not allowed: a folder fedlib can create and write"):
        run(make_config(method="fedavg", **DIGITS), cache_dir=blocker / "cache", progress=False)


def test_hp_with_several_methods_goes_to_each_method_that_has_it(monkeypatch, capsys):
    seen = {}

    def fake_run(cfg, **kwargs):
        seen[cfg.method] = dict(cfg.hyper)
        return {"history": [{"personal_local_acc": 0.5}], "wall_time_s": 0.0, "final": {}}

    monkeypatch.setattr(experiment, "run", fake_run)
    assert main([*BASE, "--cache", "none", "--method", "fedavg", "fedgpa", "fedprox", "--hp", "mu=0.3"]) == 0
    assert seen == {"fedavg": {}, "fedgpa": {"mu": 0.3}, "fedprox": {"mu": 0.3}}


def _page(folder, code: str):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("scale = 'ci'", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(folder / "page.ipynb"))


@pytest.mark.parametrize("code, fault, says", [
    ("import os\nos._exit(1)", None, "its kernel died (killed, or out of memory); the previous page is kept"),
    ("print(1)", "disk", "out.ipynb could not be written (No space left on device); the previous page is kept"),
])
def test_a_dead_kernel_or_a_full_disk_is_one_line_and_the_previous_page_is_kept(code, fault, says, tmp_path,
                                                                               monkeypatch):
    """A kernel killed mid-notebook was a DeadKernelError traceback; a full disk while the page was written left
    it truncated."""
    import errno
    import shutil

    from fedlib.errors import NotebookFailed, StorageFailed

    build = book_builder()
    monkeypatch.setattr(build, "ROOT", tmp_path)
    _page(tmp_path, code)
    (tmp_path / "out.ipynb").write_text("the previous page")
    if fault == "disk":
        real = shutil.copyfile

        def half_then_full(src, dst, **kw):
            if str(dst).endswith(".tmp"):
                open(dst, "w").write("{ half a page")
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(src, dst, **kw)

        monkeypatch.setattr(shutil, "copyfile", half_then_full)
    with pytest.raises(NotebookFailed if fault is None else StorageFailed) as err:
        build.execute("page.ipynb", "x", {"output": "out.ipynb", "parameters": {"scale": "ci"}})
    assert says in str(err.value) and "\n" not in str(err.value)
    assert (tmp_path / "out.ipynb").read_text() == "the previous page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.ipynb", "page.ipynb"]


def test_a_typo_in_a_notebook_parameter_names_the_notebook_and_the_parameter(tmp_path):
    from pathlib import Path

    output = Path("reproduced") / f"typo-{tmp_path.name}.ipynb"   # outputs lie inside the repository
    manifest = tmp_path / "experiments.yml"
    manifest.write_text(json.dumps({"build": ["book"], "chapters": [{
        "notebook": "notebooks/fedgpa/fedgpa.ipynb",
        "configurations": {"book": {"output": str(output), "parameters": {"scael": "book"}}}}]}))
    with pytest.raises(ConfigError, match=r"notebooks/fedgpa/fedgpa.ipynb \[book\] parameter scael='book' is not "
                                          r"allowed: a parameter of fedgpa.ipynb: scale, "):
        book_builder().build_book(str(manifest), build=False)
    assert not (book_builder().ROOT / output).exists()


def _run_in_child(cache, queue):
    torch.set_num_threads(1)
    record = run(make_config(method="fedavg", **DIGITS), cache_dir=cache, progress=False)
    queue.put(record["finished_at"] + "|" + str(record["session_wall_s"]))


@pytest.mark.slow
def test_two_identical_runs_sharing_a_cache_train_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_run_in_child, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    answers = [queue.get(timeout=5) for _ in procs]
    assert answers[0] == answers[1]   # the second waited for the first and read its record
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("content", ["", "{\"config\": {", "[]"])
def test_a_damaged_cached_record_is_moved_aside_and_recomputed(tmp_path, content, capsys):
    cfg = make_config(method="fedavg", **DIGITS)
    (tmp_path / f"{cfg.key()}.json").write_text(content)
    record = run(cfg, cache_dir=tmp_path, progress=False)
    assert len(record["history"]) == 2
    assert json.loads((tmp_path / f"{cfg.key()}.json").read_text())["key"] == cfg.key()
    aside = list(tmp_path.glob(f"{cfg.key()}.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == content
    assert f"cached record {tmp_path / (cfg.key() + '.json')} could not be read" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated"])
def test_a_damaged_checkpoint_is_moved_aside_and_the_run_starts_again(tmp_path, content, capsys):
    cfg = make_config(method="fedavg", **DIGITS)
    (tmp_path / f"{cfg.key()}.ckpt").write_bytes(content)
    record = run(cfg, cache_dir=tmp_path, progress=False)
    assert not record["resumed"] and len(record["history"]) == 2
    assert len(list(tmp_path.glob(f"{cfg.key()}.ckpt.corrupt-*"))) == 1
    said = capsys.readouterr()
    assert f"checkpoint {tmp_path / (cfg.key() + '.ckpt')} could not be read" in said.out + said.err


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_a_truncated_data_file_names_the_file_and_how_to_restore_it(tmp_path):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 20), ("t10k", 10)):
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(rng.integers(0, 255, (n, 28, 28))))
        with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(_idx(rng.integers(0, 10, n)))
    assert load_dataset("fmnist", root=tmp_path).train_x.shape == (20, 1, 28, 28)   # the valid files load
    images = folder / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-100])
    with pytest.raises(DataNotFoundError, match=rf"{images}.*truncated.*restore the file.*apt-get install"):
        load_dataset("fmnist", root=str(tmp_path) + "/")   # another root string: not the cached load
    labels = folder / "train-labels-idx1-ubyte.gz"
    labels.write_bytes(labels.read_bytes()[:-8])
    with pytest.raises(DataNotFoundError, match=rf"{labels} cannot be decompressed"):
        load_dataset("fmnist", root=str(tmp_path) + "//")


def _write_fmnist(folder, rng, train=20, test=10, side=28, label_of=None):
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", train), ("t10k", test)):
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(rng.integers(0, 255, (n, side, side))))
        labels = rng.integers(0, 10, n) if label_of is None else label_of(prefix, n)
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx(labels))


def _swap_in_test_images(folder):
    (folder / "train-images-idx3-ubyte").write_bytes((folder / "t10k-images-idx3-ubyte").read_bytes())


def _swap_in_test_split(folder):
    for part in ("images-idx3", "labels-idx1"):
        (folder / f"train-{part}-ubyte").write_bytes((folder / f"t10k-{part}-ubyte").read_bytes())


def _cifar(folder, rng, data=None, labels=None):
    import pickle

    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8) if data is None else data,
                 b"labels": [0, 1, 2, 3] if labels is None else labels}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)


def _svhn(folder, rng, labels=(10, 1), garbage=False):
    from scipy.io import savemat

    folder.mkdir(parents=True)
    for split in ("train", "test"):
        if garbage:
            (folder / f"{split}_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file, not really" + bytes(64))
        else:
            savemat(folder / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, 2), dtype=np.uint8),
                                                    "y": np.array(labels).reshape(-1, 1)})


def _usps(folder, rng, labels=(1, 10), truncate=False):
    import bz2

    folder.mkdir(parents=True)
    for name in ("usps.bz2", "usps.t.bz2"):
        lines = [f"{y} " + " ".join(f"{i + 1}:{v:.3f}" for i, v in enumerate(rng.uniform(-1, 1, 256)))
                 for y in labels]
        data = bz2.compress(("\n".join(lines) + "\n").encode())
        (folder / name).write_bytes(data[: len(data) // 2] if truncate else data)


# hostile or damaged dataset files: (dataset, how the files are made under $FEDLIB_DATA, what the one line names)
HOSTILE_DATA = [
    ("fmnist", lambda r, g: _write_fmnist(r / "fashion-mnist", g, label_of=lambda p, n: np.full(n, 200)),
     r"train-labels-idx1-ubyte holds label 200 \(20 such\), outside 0..9; restore the file: install them"),
    ("fmnist", lambda r, g: (_write_fmnist(r / "fashion-mnist", g), _swap_in_test_images(r / "fashion-mnist")),
     r"train-images-idx3-ubyte holds 10 images but .*train-labels-idx1-ubyte 20 labels"),
    ("fmnist", lambda r, g: (_write_fmnist(r / "fashion-mnist", g), _swap_in_test_split(r / "fashion-mnist")),
     r"train-images-idx3-ubyte holds the same images as .*t10k-images-idx3-ubyte"),
    ("fmnist", lambda r, g: _write_fmnist(r / "fashion-mnist", g, side=32),
     r"train-images-idx3-ubyte holds images of shape \(32, 32\), where fmnist's are \(28, 28\)"),
    ("fmnist", lambda r, g: _write_fmnist(r / "fashion-mnist", g, test=0), r"t10k-images-idx3-ubyte holds no images"),
    ("mnist", lambda r, g: _write_fmnist(r / "mnist", g, label_of=lambda p, n: np.zeros((n, 1))),
     r"train-labels-idx1-ubyte holds uint8 labels of shape \(20, 1\), where mnist's are one integer per image"),
    ("cifar10", lambda r, g: _cifar(r / "cifar10/cifar-10-batches-py", g, labels=[0, 1, 2, 10]),
     r"cifar-10-batches-py/\{data_batch_1,.*,data_batch_5\} holds label 10 \(5 such\), outside 0..9"),
    ("cifar10", lambda r, g: _cifar(r / "cifar10/cifar-10-batches-py", g, data=np.zeros((4, 3072), np.float32)),
     r"data_batch_1 is not a CIFAR python batch \(its data is float32 of shape \(4, 3072\)"),
    ("svhn", lambda r, g: _svhn(r / "svhn", g, garbage=True), r"train_32x32.mat is not an SVHN .mat file"),
    ("svhn", lambda r, g: _svhn(r / "svhn", g, labels=(15, 1)), r"train_32x32.mat holds label 15 \(1 such\)"),
    ("usps", lambda r, g: _usps(r / "usps", g, truncate=True), r"usps.bz2 is not a USPS LIBSVM file"),
    ("usps", lambda r, g: _usps(r / "usps", g, labels=(1, 11)), r"usps.bz2 holds label 10 \(1 such\), outside 0..9"),
]


@pytest.mark.parametrize("name, make, says", HOSTILE_DATA, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(HOSTILE_DATA)])
def test_a_hostile_data_file_is_named_in_one_line_before_training(name, make, says, tmp_path, monkeypatch, capsys,
                                                                   no_training):
    from fedlib.data import sources

    root = tmp_path / "data"
    make(root, np.random.default_rng(0))
    monkeypatch.setenv("FEDLIB_DATA", str(root))
    sources._load_cached.cache_clear()
    try:
        assert main(["run", "--dataset", name, "--partition", "iid", "--clients", "2", "--budget", "smoke",
                     "--no-progress", "--cache", "none"]) == 2
    finally:
        sources._load_cached.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: dataset "), err
    assert re.search(says, err[0]), err[0]


def test_nan_message_counts_rounds_from_one(tmp_path):
    cfg = make_config(method="fedavg", **{**DIGITS, "lr": 1e6, "rounds": 3})
    with pytest.raises(TrainingDiverged, match=r"in round [123], client \d+: lower the learning rate \(lr=1000000.0\) "
                                               r"or a hyperparameter that weights the method's loss"):
        run(cfg, cache_dir=None, progress=False)


def test_impossible_dirichlet_says_raise_alpha_or_lower_the_client_count():
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ConfigError, match="raise alpha .* or lower the number of clients"):
        dirichlet(labels, 19, np.random.default_rng(0), alpha=0.01, min_size=10, max_tries=5)


@pytest.mark.slow
def test_checkpoints_of_1000_clients_rewrite_only_the_clients_that_trained(tmp_path):
    cfg = make_config(method="fedavg", dataset="digits", partition={"name": "iid"}, num_clients=1000, rounds=3,
                      local_epochs=1, batch_size=32, lr=0.05, fraction=0.01, eval_every=3)
    checkpoint = tmp_path / "run.ckpt"
    first = build(cfg, checkpoint=checkpoint)
    first.run()
    shards = sorted(p.name for p in (tmp_path / "run.ckpt.d").iterdir())
    by_round = {r: sum(name.endswith(f"-r{r}.pt") for name in shards) for r in (1, 2, 3)}
    assert len(shards) == 1000   # one current file per client, superseded ones deleted
    assert by_round[2] <= 10 and by_round[3] <= 10 and by_round[1] >= 980   # rounds 2-3 wrote <= 10 clients each
    main_file = serial.load(checkpoint)
    assert "clients" not in main_file and len(main_file["client_files"]) == 1000   # no client model in it
    sizes = {p.name: p.stat().st_size for p in (tmp_path / "run.ckpt.d").iterdir()}
    written_in_round_3 = checkpoint.stat().st_size + sum(v for k, v in sizes.items() if k.endswith("-r3.pt"))
    assert written_in_round_3 * 5 < sum(sizes.values())   # vs rewriting every client's slot
    resumed = build(cfg, checkpoint=checkpoint)   # nothing left to train: every slot comes back from its shard
    resumed.run()
    assert resumed.start_round == 3 and resumed.history == first.history
    for a, b in zip(first.clients, resumed.clients):
        assert all(torch.equal(a.model[k], b.model[k]) for k in a.model)


# `records` checks its arguments in the parent process, before any worker starts (issue 27)
RECORDS_BAD = [
    (["fedgpa", "--device", "tpu"], "device='tpu' is not allowed"),
    (["fedgpa", "--seeds", "-1"], "seed=-1 is not allowed"),
    (["fedgpa", "--executor", "bad"], "executor='bad' is not allowed: one of sequential, process, batched"),
    (["fedgpa", "--workers", "0"], "--workers=0 is not allowed: a positive number of processes"),
    (["fedgpa", "--workers", "-1"], "--workers=-1 is not allowed"),
    (["fedgpa", "--deadline", "-5"], "--deadline=-5.0 is not allowed: a positive number of seconds"),
    (["fedgpa", "--deadline", "nan"], "--deadline=nan is not allowed"),
    (["fedgpa", "--seeds", "0", "0"], "--seeds=[0, 0] is not allowed: distinct seeds"),
    (["fedgpa", "--tables", "bogus"], "tables='bogus' is not allowed: tables of this chapter"),
    (["fedgpa", "--max-runs", "0"], "--max-runs=0 is not allowed"),
    (["nochapter"], "chapter='nochapter' is not allowed"),
]


@pytest.mark.parametrize("args, names", RECORDS_BAD, ids=[" ".join(a) for a, _ in RECORDS_BAD])
def test_records_refuses_bad_arguments_in_one_line(args, names, capsys, no_training):
    assert main(["records", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and names in err[0], err


def test_records_into_a_folder_it_cannot_write_is_refused_before_training(tmp_path, monkeypatch, capsys, no_training):
    """It trained every run of the table before the first write failed."""
    from fedlib import results

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(results, "RESULTS", blocker / "results")
    assert main(["records", "fedmate", "--scale", "reference", "--tables", "table1", "--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the committed records' folder=" in err[0] and "a folder fedlib can create" in err[0], err


def test_a_lock_held_by_a_stopped_process_is_named_not_waited_for_forever(tmp_path):
    """A run whose config's lock is held by a SIGSTOPped process waited forever; a holder that is running is waited
    for, and one that is gone left no lock."""
    import signal
    import subprocess
    import sys

    from fedlib.errors import LockHeld
    from fedlib.experiment.records import cache_lock

    lock = tmp_path / "0123456789abcdef.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, sys\nfrom pathlib import Path\nfrom fedlib.experiment.records import cache_lock\n"
        f"with cache_lock(Path({str(lock)!r})):\n    print('held', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGSTOP)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match=rf"is held by process {holder.pid}, which is stopped: resume it"):
            with cache_lock(lock):
                pass
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.wait(timeout=60)
    with cache_lock(lock):   # released when its holder ended
        assert lock.read_text() == str(__import__("os").getpid())


def test_clients_whose_models_do_not_fit_in_memory_are_refused_with_the_figures(monkeypatch, no_training):
    """5,000 clients of the McMahan CNN passed 6 GB within seconds with no estimate: each client slot keeps a copy
    of the model (2.2 MiB: 582,026 float32 parameters), so 5,000 need 10.8 GiB."""
    from fedlib.experiment import build, wiring

    monkeypatch.setattr(wiring, "free_memory", lambda device: 6 * 2**30)
    cfg = make_config(method="fedavg", dataset="mnist", model="cnn_fedavg", partition={"name": "iid"},
                      num_clients=5000, rounds=1)
    with pytest.raises(ConfigError, match=r"num_clients=5000 is not allowed: a number of clients whose models fit in "
                                          r"memory: 5,000 copies of a 2.2 MiB model need 10.8 GiB, cpu has 6.0 GiB"):
        build(cfg)
    model_bytes = 582_026 * 4   # 2,000 copies, 4.3 GiB, fit: checked without allocating them
    wiring.check_allocation(cfg.built_method(), 10, 512, model_bytes, dataclasses.replace(cfg, num_clients=2000))


def test_records_of_a_grid_seed_only_queue_that_seed():
    from fedlib.recording import recording_order
    from fedlib.studies import fedgpa

    assert {c.seed for c in recording_order(fedgpa.tables("paper"), [7])} == {7}


def _hostile(text: str, damage: str, other_key: str) -> str:
    record = json.loads(text)
    last = dict(record["history"][-1])
    return {
        "truncate": lambda: text[:1000], "history is text": lambda: json.dumps({**record, "history": "x"}),
        "not an object": lambda: "[1, 2]",
        # hostile: another config's record under this config's file name, a NaN accuracy shown as 'nan (n=1)',
        # a final row that is not the last evaluated one, JSON nested past Python's recursion limit
        "another key": lambda: json.dumps({**record, "key": other_key}),
        "nan accuracy": lambda: json.dumps({**record, "history": [*record["history"][:-1],
                                                                   {**last, "personal_local_acc": float("nan")}],
                                            "final": {**last, "personal_local_acc": float("nan")}}),
        "accuracy 99.99": lambda: json.dumps({**record, "history": [*record["history"][:-1],
                                                                     {**last, "personal_local_acc": 99.99}],
                                              "final": {**last, "personal_local_acc": 99.99}}),
        "final not last": lambda: json.dumps({**record, "final": {**last, "personal_local_acc": 0.9999}}),
        "nested": lambda: "[" * 100_000 + "]" * 100_000,
    }[damage]()


DAMAGES = ["truncate", "history is text", "not an object", "another key", "nan accuracy", "accuracy 99.99",
           "final not last", "nested"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_result_record_is_named_and_counted_as_missing(tmp_path, damage, capsys):
    """One damaged (or hostile) file under results/ is named on stderr and left out; the others load; ``lookup``
    says missing for its config, so the book shows the cell as missing instead of training it."""
    from fedlib import results

    cfgs = [make_config(method="fedavg", **DIGITS, seed=s) for s in (0, 1)]
    for cfg in cfgs:
        results.write(run(cfg, cache_dir=None, progress=False), "demo", tmp_path)
    path = results.path_of("demo", cfgs[0].key(), tmp_path)
    text = path.read_text()
    path.write_text(_hostile(text, damage, cfgs[1].key()))
    stored = results.load("demo", tmp_path)
    assert [s.record["key"] for s in stored] == [cfgs[1].key()]
    assert f"result record {path} is damaged" in capsys.readouterr().err
    assert results.lookup("demo", cfgs, tmp_path)[0] is None
    assert path.read_text() != text   # left as it is for inspection; `records` rewrites it


def test_a_record_from_a_newer_fedlib_is_named_and_never_rewritten(tmp_path, capsys):
    """A record whose config has a field this fedlib does not know was silently counted missing; it is named, shown
    as stale, and today's run of the same cell writes under its own key beside it."""
    from fedlib import results

    cfg = make_config(method="fedavg", **DIGITS)
    record = run(cfg, cache_dir=None, progress=False)
    newer = {**record, "key": "feedfacefeedface", "config": {**record["config"], "a_later_field": 1}}
    path = results.write(newer, "demo", tmp_path)
    stored = results.load("demo", tmp_path)
    assert [s.stale for s in stored] == [True] and "a_later_field" in stored[0].reason
    assert f"result record {path} was made by a newer fedlib" in capsys.readouterr().err
    today = results.write(record, "demo", tmp_path)
    assert today != path and json.loads(path.read_text())["config"]["a_later_field"] == 1


def test_a_cached_record_with_wrong_types_is_not_taken_as_finished(tmp_path, capsys):
    cfg = make_config(method="fedavg", **DIGITS)
    record = run(cfg, cache_dir=tmp_path, progress=False)
    (tmp_path / f"{cfg.key()}.json").write_text(json.dumps({**record, "history": "x"}))
    again = run(cfg, cache_dir=tmp_path, progress=False)
    assert isinstance(again["history"], list) and len(again["history"]) == 2
    assert "not a finished run's record: its 'history' is str, not a list" in capsys.readouterr().err


def test_every_method_aggregates_float64_uploads():
    """Each method's server rule on one round's real uploads cast to float64 (issue 27: FedGPA, FedMate, FedFA
    and FEDIC mixed the dtypes), and the result is finite."""
    from fedlib.methods import METHODS

    def as_float64(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.double()
        if isinstance(x, dict):
            return {k: as_float64(v) for k, v in x.items()}
        if isinstance(x, list):
            return [as_float64(v) for v in x]
        return x

    for name in METHODS:
        part = {"name": "dirichlet", "alpha": 0.5, **({"server": 5} if name == "fedic" else {})}
        fed = build(make_config(method=name, **{**DIGITS, "partition": part, "num_clients": 3, "rounds": 1}))
        seen = {}
        rule = fed.method.aggregate
        fed.method.aggregate = lambda server, uploads, seen=seen: seen.update(uploads=uploads)
        fed.run_round(0)
        rule(fed.server, {k: as_float64(u) for k, u in seen["uploads"].items()})
        fed.check_server_finite()


def test_server_side_divergence_stops_the_run_with_one_line(tmp_path, capsys):
    """CCVR's classifier retraining at lr 3e38 overflows on the server: the run stops like a client's NaN."""
    args = [*BASE, "--cache", str(tmp_path), "--method", "ccvr", "--hp", "lr=3e38"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the server's calibrated_head.head.weight became non-finite in round 1 (ccvr's " \
                               "aggregation): lower the hyperparameters of its server rule" in err[0], err


# bad manifests for `python -m fedlib book`: (file content or None for a folder, what the one line names)
BOOK_BAD = [
    ("# a markdown file\n* not: [yaml\n", "valid YAML (line 2"),
    (None, "(a folder)"),
    ("", "the whole file='NoneType' is not allowed"),
    ("chapters: []\n", "build=None is not allowed: a list of configuration names"),
    ("build: [book]\nchapters: []\n", "chapters=[] is not allowed"),
    ("build: [book]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      book: {parameters: {scale: book}}\n", "[book] output=None is not allowed: a notebook path"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {scale: 5}}\n", "parameter scale=5 is not allowed: a str like its"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/nosuch.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb}\n", "notebook='notebooks/nosuch.ipynb' is not allowed"),
    ("build: [book\n", "valid YAML (line 2"),
    ("build: [book]\nregistered: yes please\nchapters: []\n", "registered='yes please' is not allowed: true or false"),
    ("build: [book]\nregistered: true\nchapters: notebooks/fedgpa/fedgpa.ipynb\n",
     "chapters='notebooks/fedgpa/fedgpa.ipynb' is not"),
    # issue 39, beyond its list: a manifest names notebooks to run and files to write, both inside the repository
    ("build: [x]\nchapters:\n  - notebook: ../../tmp/evil.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb}\n", "notebook='../../tmp/evil.ipynb' is not allowed: a notebook path inside the"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: /tmp/elsewhere.ipynb}\n", "output='/tmp/elsewhere.ipynb' is not allowed: a path inside"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: notebooks/../../out.ipynb}\n", "output='notebooks/../../out.ipynb' is not allowed"),
    # issue 67: an output that is another chapter's committed notebook would be overwritten
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: notebooks/fedpcl/fedpcl.ipynb}\n  - notebook: notebooks/fedpcl/fedpcl.ipynb\n"
     "    configurations:\n"
     "      y: {output: o.ipynb}\n", "not another chapter's notebook"),
    # issue 67: papermill parameters of an allowed type but not an allowed value ran (at the default, or with s = 80's
    # paper column beside s = 0), or failed deep in a cell
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {scale: nonsense}}\n",
     "parameter scale='nonsense' is not allowed: one of ci, book, reference, paper"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {s_values: [0, 20.5]}}\n",
     "parameter s_values=[0, 20.5] is not allowed: a list of 20, 80"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {methods: fedavg}}\n",
     "parameter methods='fedavg' is not allowed: a list"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedgpa/fedgpa.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {settings: [7]}}\n",
     "parameter settings=[7] is not allowed: a list of 1, 2"),
    ("build: [x]\nchapters:\n  - notebook: notebooks/fedmate/fedmate.ipynb\n    configurations:\n"
     "      x: {output: o.ipynb, parameters: {executor: threads}}\n", "parameter executor='threads' is not allowed"),
]


@pytest.mark.parametrize("content, names", BOOK_BAD, ids=[n for _, n in BOOK_BAD])
def test_book_refuses_a_bad_manifest_in_one_line(content, names, tmp_path, capsys):
    path = tmp_path / "manifest.yml"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    assert main(["book", "--manifest", str(path), "--no-build"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and names in err[0], err


def full_disk(monkeypatch, matches, after: int = 0):
    """``open`` for writing fails with ENOSPC on paths containing ``matches``, after ``after`` such opens."""
    import builtins
    import errno

    real = builtins.open
    seen = {"n": 0}

    def fake(file, mode="r", *args, **kwargs):
        if "w" in str(mode) and matches in str(file):
            seen["n"] += 1
            if seen["n"] > after:
                raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real(file, mode, *args, **kwargs)

    def fake_write_text(path, *args, **kwargs):
        if matches in str(path) and (matches == "out.json" or "out.json" not in str(path)):
            seen["n"] += 1
            if seen["n"] > after:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_write_text(path, *args, **kwargs)

    import pathlib

    real_write_text = pathlib.Path.write_text
    monkeypatch.setattr(builtins, "open", fake)
    monkeypatch.setattr(pathlib.Path, "write_text", fake_write_text)


# faults in the middle of a run: (what fails, after how many writes, what the one line must say)
FAULTS = [
    (".ckpt.d", 6, "could not be written after round 2 (No space left on device); the run stopped: the checkpoint "
                   "of round 1 is kept"),
    (".ckpt.d", 0, "after round 1 (No space left on device); the run stopped: no round is checkpointed yet"),
    (".ckpt.", 1, "could not be written after round 1"),
    (".json.", 0, ".json could not be written (No space left on device); the run's last checkpoint is kept"),
    ("out.json", 0, "--out "),
]


@pytest.mark.parametrize("target, after, says", FAULTS, ids=[f"{t} after {a}" for t, a, _ in FAULTS])
def test_a_write_failing_mid_run_ends_in_one_line_and_the_run_resumes(target, after, says, tmp_path, monkeypatch,
                                                                        capsys):
    args = [*BASE, "--cache", str(tmp_path / "cache"), "--set", "rounds=3", "--out", str(tmp_path / "out.json")]
    with monkeypatch.context() as patch:
        full_disk(patch, target, after)
        assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    if target == "out.json":   # the failed --out left no file behind, not a truncated one
        assert not (tmp_path / "out.json").exists() and not list(tmp_path.glob(".out.json.*"))
    assert main(args) == 0                      # space again: the same command resumes (or reads the record)
    records = json.loads((tmp_path / "out.json").read_text())
    assert len(records) == 1 and len(records[0]["history"]) == 3


@pytest.mark.slow
def test_a_killed_worker_process_is_one_line_and_the_next_run_starts_afresh(capsys):
    from fedlib.engine.workers import POOLS

    args = [*BASE, "--cache", "none", "--executor", "process", "--workers", "2"]
    assert main(args) == 0
    capsys.readouterr()
    _, pool, _ = POOLS.pools["clients"]
    for process in list(pool._processes.values()):
        process.kill()
        process.join()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: a worker process of the 'process' executor died (killed, or out of memory); run again "
                   "with one worker (--workers 1, or --executor sequential) to see the error"], err
    assert main(args) == 0   # a fresh pool


@pytest.mark.slow
def test_a_stopped_worker_process_is_one_line_and_the_next_run_starts_afresh(capsys):
    """A SIGSTOPped worker of the process executor left the run waiting forever."""
    import os
    import signal
    import threading
    import time

    from fedlib.engine.workers import POOLS

    # every worker is stopped, so the run cannot finish on the others; 5,000 rounds outlast the thread's start
    args = [*BASE, "--cache", "none", "--executor", "process", "--workers", "2", "--set", "rounds=5000"]
    stopped: list[int] = []

    def stop_the_workers():   # once the run's pool has started
        while "clients" not in POOLS.pools or not POOLS.pools["clients"][1]._processes:
            time.sleep(0.01)
        for process in list(POOLS.pools["clients"][1]._processes.values()):
            os.kill(process.pid, signal.SIGSTOP)
            stopped.append(process.pid)

    threading.Thread(target=stop_the_workers, daemon=True).start()
    started = time.time()
    try:
        assert main(args) == 2
    finally:   # never leave a stopped process behind, whatever the run did
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and any(f"worker process {pid} of the 'process' executor was stopped" in err[0]
                                 for pid in stopped), err
    assert time.time() - started < 60 and "clients" not in POOLS.pools
    assert main([*args[:-1], "rounds=1"]) == 0   # a fresh pool


@contextlib.contextmanager
def pool_with_a_stopped_worker(wait_for_the_stop: bool):
    """A started pool of two workers, the first one SIGSTOPped (waiting until the stop has landed, or not); on
    leaving, every worker must be gone within 10 s, and any left is killed whatever the test did."""
    import os
    import signal
    import time

    from fedlib.engine.workers import process_state, start_pool, worker_process_setup

    pool = start_pool(2, worker_process_setup)
    pids = [p.pid for p in pool._processes.values()]
    os.kill(pids[0], signal.SIGSTOP)
    try:
        while wait_for_the_stop and process_state(pids[0]) not in ("T", "t"):   # the signal lands asynchronously
            time.sleep(0.01)
        yield pool
        deadline = time.time() + 10
        while any(process_state(pid) not in (None, "Z") for pid in pids) and time.time() < deadline:
            time.sleep(0.05)
        assert all(process_state(pid) in (None, "Z") for pid in pids)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_pool_with_a_stopped_idle_worker_is_shut_down_without_waiting_for_it():
    """A worker stopped while idle never exits on its own: shutting its pool down (as the interpreter does at
    exit) waited forever and held CI past its time limit."""
    import time

    from fedlib.engine.workers import stop_pool

    with pool_with_a_stopped_worker(wait_for_the_stop=True) as pool:
        started = time.time()
        stop_pool(pool)
        assert time.time() - started < 10


def test_a_worker_stopped_after_the_pool_was_told_to_stop_is_killed_after_the_grace_time():
    """The stop can land between the check for stopped workers and the wait for their exit: the wait is bounded
    (grace_s) and a worker still alive then is killed, so neither the shutdown nor the interpreter's exit hangs."""
    import threading
    import time

    from fedlib.engine.workers import stop_pool

    with pool_with_a_stopped_worker(wait_for_the_stop=False) as pool:   # the check may or may not see the stop
        started = time.time()
        done = threading.Thread(target=stop_pool, args=(pool,), kwargs={"grace_s": 2.0})
        done.start()
        done.join(timeout=30)
        assert not done.is_alive() and time.time() - started < 30


@pytest.mark.parametrize("suffix", [".lock", ".json"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "link to /dev/zero"])
def test_a_cache_entry_that_is_not_a_regular_file_is_moved_aside_unopened(kind, suffix, tmp_path, capsys):
    """A FIFO hung the open, a folder was a traceback, a link to /dev/zero read forever; each is named, moved aside
    without being opened, and the run goes on (a record is recomputed)."""
    import os

    cfg = make_config(method="fedavg", **{**DIGITS, "rounds": 1})
    entry = tmp_path / f"{cfg.key()}{suffix}"
    {"fifo": os.mkfifo, "folder": os.mkdir, "link to /dev/zero": lambda p: os.symlink("/dev/zero", p)}[kind](entry)
    record = run(cfg, cache_dir=tmp_path, progress=False)
    assert len(record["history"]) == 1 and entry.is_file() and not entry.is_symlink()
    assert "is not a regular file" in capsys.readouterr().err
    assert len(list(tmp_path.glob(f"*{suffix}.corrupt-*"))) == 1


def test_a_cached_record_copied_under_another_configurations_name_is_not_served(tmp_path, capsys):
    """Seed 1's record copied to seed 0's cache name was served as seed 0's result."""
    import shutil

    seed0, seed1 = (make_config(method="fedavg", seed=s, **{**DIGITS, "rounds": 1}) for s in (0, 1))
    first = run(seed1, cache_dir=tmp_path, progress=False)
    shutil.copy(tmp_path / f"{seed1.key()}.json", tmp_path / f"{seed0.key()}.json")
    record = run(seed0, cache_dir=tmp_path, progress=False)
    assert record["seed"] == 0 and record["key"] == seed0.key() and first["seed"] == 1
    assert f"it is the record of another configuration (key {seed1.key()})" in capsys.readouterr().err


def test_a_worker_that_dies_as_its_pool_starts_is_one_line():
    """A worker killed while a pool (re)started was a RuntimeError traceback on the command line."""
    import os

    from fedlib.engine.workers import start_pool
    from fedlib.errors import WorkerDied

    with pytest.raises(WorkerDied, match="could not start the test pool: a worker process died as it started"):
        start_pool(2, os._exit, (1,), what="test pool")


def test_every_fedlib_error_crosses_a_process_boundary_with_its_message():
    import pickle

    from fedlib.errors import ClientFailed, NotebookFailed, StorageFailed

    errors = [ConfigError("hyper.mu", 2.0, "a number in [0, 1]"), DataNotFoundError("no files under /x"),
              TrainingDiverged("loss became nan in round 1"), NotebookFailed("cell 3 failed"),
              StorageFailed("disk full"), ClientFailed("client 1 failed", "the node's report")]
    for exc in errors:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
    assert pickle.loads(pickle.dumps(errors[-1])).detail == "the node's report"


@pytest.mark.slow
def test_a_config_error_raised_in_a_worker_process_reaches_the_grid_intact(tmp_path):
    """Refused only once the data is loaded (in the worker): the grid names it and goes on with the rest."""
    from fedlib.recording import record_grid

    good = make_config(method="fedavg", **{**DIGITS, "rounds": 1})
    too_big = make_config(method="fedavg", **{**DIGITS, "rounds": 1}, global_test_size=100_000)
    lines = []
    summary = record_grid([good, too_big], "demo", workers=2, device="cpu", executor="sequential", root=tmp_path,
                          log=lines.append, cache_dir=tmp_path / "cache")
    assert (summary["done"], summary["failed"]) == (1, 1)
    assert any("global_test_size=100000 is not allowed: at most the 540 test samples" in line for line in lines), lines


@pytest.mark.parametrize("name, value, says", [
    ("FEDLIB_CACHE", "", "FEDLIB_CACHE='' is not allowed: a folder for the result cache (or unset, for the default)"),
    ("FEDLIB_RESULTS", "", "FEDLIB_RESULTS='' is not allowed: a folder for the committed records"),
    ("FEDLIB_RESULTS", "FILE", "is not allowed: a folder for the committed records, not a file"),
    ("FEDLIB_DATA", "FILE", "is not allowed: a folder for the datasets, not a file"),
])
def test_folder_variables_are_checked_like_config_fields(name, value, says, tmp_path, monkeypatch, capsys,
                                                         no_training):
    if value == "FILE":
        value = str(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv(name, value)
    for argv in ([*BASE, "--cache", str(tmp_path / "c")], ["records", "fedgpa", "--deadline", "1e-9"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not list(tmp_path.glob("*.json"))


def test_worker_counts_are_bounded_by_cores_work_and_memory(capsys, monkeypatch):
    """12 workers for 2 clients on this machine: at most the clients and the cores, said in one line; with the
    memory of one worker free, one."""
    import os

    from fedlib.engine import workers

    cores = len(os.sched_getaffinity(0))
    assert workers.bounded_workers(12, 2) == min(2, cores)
    assert "12 worker processes asked for" in capsys.readouterr().err
    assert workers.bounded_workers(1, 100) == 1 and capsys.readouterr().err == ""
    monkeypatch.setattr(workers, "available_memory", lambda: workers.WORKER_BYTES + 1)
    assert workers.bounded_workers(8, 8) == 1
    assert "GiB free" in capsys.readouterr().err


def test_an_infeasible_dirichlet_is_refused_not_retried_forever():
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ConfigError, match=r"max_tries=1000000000 is not allowed: a number of Dirichlet draws in "
                                          r"\[1, 10000\]"):
        dirichlet(labels, 19, np.random.default_rng(0), alpha=0.01, min_size=10, max_tries=10**9)


def test_an_existing_out_file_is_replaced_only_by_a_complete_one(tmp_path, capsys):
    out = tmp_path / "out.json"
    out.write_text('["earlier results"]')
    args = [*BASE, "--cache", str(tmp_path / "cache"), "--out", str(out)]
    assert main([*args, "--set", "rounds=abc"]) == 2          # refused: the old file is untouched
    assert json.loads(out.read_text()) == ["earlier results"]
    assert main(args) == 0
    assert json.loads(out.read_text())[0]["config"]["dataset"] == "digits"


# ---------------------------------------------------------------------- records checked against themselves
def _committed_like(tmp_path) -> tuple[dict, object]:
    """A made-up committed record whose numbers agree with themselves: two clients' confusion counts, the accuracies
    they give, five rounds of a five-round config."""
    from fedlib.experiment import make_config

    cfg = make_config(method="fedavg", dataset="digits", partition={"name": "dirichlet", "alpha": 1.0,
                                                                     "min_size": 30}, num_clients=2, rounds=5)
    final = {"round": 5, "personal_local_acc": 0.75, "personal_local_acc_clients": [0.8, 0.7]}
    record = {"config": cfg.flat(), "key": cfg.key(), "seed": 0, "scale": "reference", "wall_time_s": 12.0,
              "history": [{"round": r, "personal_local_acc": 0.5} for r in range(1, 5)] + [final], "final": final,
              "final_confusions": {"personal_local": [[[4, 1], [0, 0]], [[7, 2], [1, 0]]]}}
    return record, cfg


SELF_INCONSISTENT = {
    "a history cut at round 3 of 5": (lambda r: r.update(history=r["history"][:3], final=r["history"][2]),
                                      "ends at round 3 of the 5"),
    "rows in reverse order": (lambda r: r.update(history=r["history"][::-1], final=r["history"][0]),
                              "not in the order"),
    "an accuracy its confusion counts do not give": (lambda r: r["final"].update(personal_local_acc=0.95) or
                                                     r["history"][-1].update(personal_local_acc=0.95),
                                                     "contradicts its own confusion counts"),
    "negative confusion counts": (lambda r: r["final_confusions"]["personal_local"][0][0].__setitem__(1, -30),
                                  "non-negative counts"),
    "an infinite wall time": (lambda r: r.update(wall_time_s=float("inf")), "not a finite number of seconds"),
}


@pytest.mark.parametrize("case", list(SELF_INCONSISTENT))
def test_a_record_that_contradicts_itself_is_named_and_never_shown(case, tmp_path, capsys):
    import json

    from fedlib import results

    record, cfg = _committed_like(tmp_path)
    assert not _problem(record)   # the honest record passes
    change, says = SELF_INCONSISTENT[case]
    change(record)
    path = tmp_path / "demo" / f"{cfg.key()}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    results.DAMAGED.pop(path, None)
    assert results.load("demo", tmp_path) == [] and results.lookup("demo", [cfg], tmp_path) == [None]
    err = capsys.readouterr().err
    assert f"result record {path} is damaged" in err and says in err and err.count("\n") == 1, err


def _problem(record):
    from fedlib.experiment.records import record_problem

    return record_problem(record)


@pytest.mark.parametrize("kind", ["folder", "fifo", "link"])
def test_a_record_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(kind, tmp_path, capsys):
    """A folder, a named pipe (reading it would hang) or a link (to /dev/zero: reading it would never end) where a
    record should be is named in one line and never opened."""
    import os

    from fedlib import results

    path = tmp_path / "demo" / "0123456789abcdef.json"
    path.parent.mkdir(parents=True)
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    assert results.load("demo", tmp_path) == []
    assert "not a regular file" in capsys.readouterr().err
    print(f"self-inconsistent records table: {len(SELF_INCONSISTENT)} contradictions and 3 non-files, each named")


def test_the_books_up_to_date_stamp_covers_the_committed_records(tmp_path, monkeypatch):
    """A page read from committed records is out of date when they change, or when FEDLIB_RESULTS points elsewhere:
    the stamp that lets ``book`` skip a notebook covers both."""
    from fedlib import results
    from fedlib.cli import book_builder

    build = book_builder()
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    (tmp_path / "results" / "demo").mkdir(parents=True)
    record = tmp_path / "results" / "demo" / "0123456789abcdef.json"
    record.write_text('{"a": 1}')
    notebook = tmp_path / "page.ipynb"
    notebook.write_text("{}")
    first = build._stamp(notebook, {"scale": "ci"})
    assert build._stamp(notebook, {"scale": "ci"}) == first
    record.write_text('{"a": 2}')
    changed = build._stamp(notebook, {"scale": "ci"})
    assert changed != first
    monkeypatch.setattr(results, "RESULTS", tmp_path / "elsewhere")
    assert build._stamp(notebook, {"scale": "ci"}) not in (first, changed)


API_MISUSE = [
    (lambda cfg: run(cfg, cache_dir=""), "cache_dir='' is not allowed"),
    (lambda cfg: run(cfg, cache_dir=123), "cache_dir=123 is not allowed"),
    (lambda cfg: run(cfg, callbacks=[1]), "callbacks=[1] is not allowed"),
    (lambda cfg: __import__("fedlib.results").results.write({"key": "../../x", "history": [{"round": 1}]}, "demo"),
     "result record key='../../x' is not allowed"),
    (lambda cfg: __import__("fedlib.results").results.write({"key": "abc", "history": [{"round": 1}]}, "../up"),
     "result record chapter='../up' is not allowed"),
    (lambda cfg: __import__("fedlib.experiment").experiment.run_many([cfg], cache_dir=None),
     "cache_dir=None is not allowed: a folder path (run_many keeps"),
    (lambda cfg: make_config(method="fedavg", dataset="digits", fraction=0.5, participation={"fraction": 0.25}),
     "fraction=0.5 is not allowed: given once: participation.fraction=0.25 is given too"),   # one was taken silently
    (lambda cfg: __import__("fedlib.experiment").experiment.summarize_runs([{"key": "k", "history": []}] * 2),
     "records=['k'] is not allowed: records of distinct runs"),   # it counted n = 2
]


@pytest.mark.parametrize("call, says", API_MISUSE, ids=[s for _, s in API_MISUSE])
def test_the_python_api_refuses_misuse_in_one_line_before_anything_runs(call, says, tmp_path, monkeypatch):
    from fedlib.errors import ConfigError
    from fedlib.experiment import make_config

    monkeypatch.chdir(tmp_path)
    cfg = make_config(method="fedavg", dataset="digits", num_clients=2, rounds=1)
    with pytest.raises(ConfigError) as err:
        call(cfg)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []   # nothing written
