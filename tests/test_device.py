"""deploy/device.py and deploy/device.sh, the way records are made on a lent GPU machine, checked on this CPU with
small IDX files in the datasets' format: the bundle decompresses to the same files and fedlib reads them from
where the device script puts them; unpacking brings back only result records and replays a real one."""
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
import device  # noqa: E402
from test_data import write_idx  # noqa: E402  (the IDX writer the data tests use)


@pytest.fixture
def small_fmnist(tmp_path, monkeypatch):
    """A 12-image Fashion-MNIST in $FEDLIB_DATA/fashion-mnist, two files gzipped as the Debian package ships them."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "data" / "fashion-mnist"
    folder.mkdir(parents=True)
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (8, 28, 28)),
              "train-labels-idx1-ubyte": rng.integers(0, 10, 8),
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (4, 28, 28)),
              "t10k-labels-idx1-ubyte": rng.integers(0, 10, 4)}
    files = {}
    for i, (stem, array) in enumerate(arrays.items()):
        path = folder / (f"{stem}.gz" if i % 2 else stem)
        write_idx(path, array, gz=bool(i % 2))
        files[stem] = gzip.decompress(path.read_bytes()) if i % 2 else path.read_bytes()
    monkeypatch.setenv("FEDLIB_DATA", str(tmp_path / "data"))
    return files


def test_the_bundle_holds_the_datasets_files_and_the_device_script_puts_them_where_fedlib_reads_them(
        small_fmnist, tmp_path):
    from fedlib.data.sources import read_arrays

    bundle = tmp_path / "bundle"
    size = device.pack(["fmnist"], bundle, version="abc1234")
    assert (bundle / "code_version").read_text() == "abc1234\n" and size > 0
    packed = {f.name.removesuffix(".xz"): f for f in (bundle / "data" / "fashion-mnist").iterdir()}
    assert set(packed) == set(small_fmnist)
    import lzma

    assert all(lzma.decompress(packed[stem].read_bytes()) == raw for stem, raw in small_fmnist.items())

    # the device script's unpacking, then fedlib reading what it wrote (records with nothing to do: --tables of an
    # unknown name is refused in one line, after the data step)
    work = tmp_path / "copy"
    (work / ".device-bundle").mkdir(parents=True)
    os.symlink(bundle / "data", work / ".device-bundle" / "data")
    (work / ".device-bundle" / "code_version").write_text("abc1234\n")
    (work / "results").mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "FEDLIB_DATA": str(tmp_path / "dev"),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", str(ROOT / "deploy" / "device.sh"), "60", "fedgpa", "--tables", "no_such_table"],
                          cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "no_such_table" in done.stdout + done.stderr
    a = read_arrays("fmnist", root=str(tmp_path / "dev"))
    assert a.train_x.shape == (8, 28, 28) and a.test_y.shape == (4,)
    assert (tmp_path / "out" / "records.tgz").exists() and (tmp_path / "out" / "new_records.txt").read_text() == ""


def test_packing_names_a_dataset_it_can_bundle():
    with pytest.raises(SystemExit, match="--datasets cifar10: one of fmnist, mnist"):
        device.pack(["cifar10"], Path("/nonexistent"), version="x")


def test_unpacking_brings_back_new_result_records_only_and_replays_one(tmp_path, capsys):
    from fedlib import results
    from fedlib.experiment import make_config, run

    cfg = make_config(method="fedavg", dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30},
                      num_clients=4, rounds=2, local_epochs=1, batch_size=32, lr=0.05, eval_every=2)
    written = results.write(run(cfg, cache_dir=None, progress=False), "demo", root=tmp_path / "made")
    root = tmp_path / "repo"
    (root / "results" / "demo").mkdir(parents=True)
    (root / "results" / "demo" / "kept.json").write_text('{"committed": true}')
    members = {"results/demo/diverged/d.json": b'{"seed": 0}',
               f"results/demo/{cfg.key()}.json": written.read_bytes(),
               "results/demo/kept.json": b'{"from": "device"}',
               "results/../escape.json": b"{}", "fedlib/__init__.py": b"import os",
               "results/demo/deep/er/x.json": b"{}"}
    folder = tmp_path / "back"
    folder.mkdir()
    with tarfile.open(folder / "records.tgz", "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    new = device.unpack(folder, root=root, replay=True)
    assert sorted(p.relative_to(root).as_posix() for p in new) == sorted([f"results/demo/{cfg.key()}.json",
                                                                           "results/demo/diverged/d.json"])
    assert json.loads((root / "results" / "demo" / "kept.json").read_text()) == {"committed": True}
    assert not (tmp_path / "escape.json").exists() and not (root / "fedlib").exists()
    assert f"replay of results/demo/{cfg.key()}.json on this CPU: ok" in capsys.readouterr().out
