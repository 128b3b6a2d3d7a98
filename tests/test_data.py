import bz2
import gzip
import pickle

import numpy as np
import pytest
from scipy.io import savemat

from fedlib.data import sources
from fedlib.errors import ConfigError, DataNotFoundError

rng = np.random.default_rng(0)


def write_idx(path, array, gz=False):
    dims = array.shape
    header = bytes([0, 0, 8, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)
    data = header + array.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDLIB_DATA", str(tmp_path))
    sources._load_cached.cache_clear()
    yield tmp_path
    sources._load_cached.cache_clear()


def test_cifar10_python_batches(root):
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": list(range(4))}
        pickle.dump(batch, open(folder / name, "wb"))
    d = sources.load_dataset("cifar10")
    assert d.train_x.shape == (20, 3, 32, 32) and d.test_x.shape == (4, 3, 32, 32) and d.num_classes == 10
    assert d.train_y.tolist() == list(range(4)) * 5


def test_cifar100_fine_labels(root):
    folder = root / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in [("train", 6), ("test", 3)]:
        pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"fine_labels": [99] * n,
                     b"coarse_labels": [1] * n}, open(folder / name, "wb"))
    d = sources.load_dataset("cifar100")
    assert d.num_classes == 100 and set(d.train_y.tolist()) == {99} and d.test_x.shape[0] == 3


def test_svhn_mat_files_label_10_is_digit_0(root):
    folder = root / "svhn"
    folder.mkdir()
    for split, n in [("train", 5), ("test", 2)]:
        savemat(folder / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                                "y": np.array([[10], [1], [2], [3], [4]][:n])})
    d = sources.load_dataset("svhn")
    assert d.train_x.shape == (5, 3, 32, 32) and d.train_y.tolist() == [0, 1, 2, 3, 4]


def test_usps_libsvm_bz2(root):
    folder = root / "usps"
    folder.mkdir()
    for name, labels in [("usps.bz2", [1, 10, 5]), ("usps.t.bz2", [2])]:
        lines = [f"{y} " + " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(rng.uniform(-1, 1, 256))) for y in labels]
        bz2.open(folder / name, "wt").write("\n".join(lines) + "\n")
    d = sources.load_dataset("usps")
    assert d.train_x.shape == (3, 1, 16, 16) and d.train_y.tolist() == [0, 9, 4]


def test_emnist_byclass_idx_gz(root):
    raw = root / "emnist" / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    for part, n in [("train", 6), ("test", 2)]:
        write_idx(raw / f"emnist-byclass-{part}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)), gz=True)
        write_idx(raw / f"emnist-byclass-{part}-labels-idx1-ubyte.gz", np.arange(n) + 55, gz=True)
    d = sources.load_dataset("emnist")
    assert d.num_classes == 62 and d.train_x.shape == (6, 1, 28, 28) and d.train_y.max() == 60


@pytest.mark.parametrize("name, where", [("cifar10", "cifar-10-batches-py"), ("svhn", "svhn"),
                                         ("usps", "usps"), ("emnist", "EMNIST")])
def test_missing_online_files_say_where_and_how(root, name, where):
    with pytest.raises(DataNotFoundError) as err:
        sources.load_dataset(name)
    message = str(err.value)
    assert where in message and "download" in message and str(root) in message


def test_unknown_dataset():
    with pytest.raises(ConfigError, match="one of fmnist"):
        sources.load_dataset("imagenet")


def test_offline_datasets_load():
    for name, n_train in [("digits", 1257), ("fmnist", 60000), ("mnist", 60000)]:
        d = sources.load_dataset(name)
        assert len(d.train_y) == n_train and d.num_classes == 10
        assert abs(float(d.train_x.mean())) < 1e-3  # standardised


def test_a_download_without_a_network_is_one_line_naming_the_folder(root, monkeypatch):
    import urllib.error

    import torchvision

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "USPS", offline)
    with pytest.raises(DataNotFoundError, match=r"downloading USPS into .*usps failed \(\[Errno -3\] Temporary "
                                                 r"failure in name resolution\); check the network"):
        sources.load_dataset("usps", download=True)


def test_standardised_data_do_not_depend_on_the_loading_process_threads(root):
    """The per-channel statistics are summed on one thread whatever the caller's count: float32 sums split by
    thread round differently (FMNIST moved by 2.4e-7 between one and two threads), so data loaded first by a
    two-thread process differed from the data a one-thread worker trained its records on."""
    import torch

    folder = root / "fashion-mnist"
    folder.mkdir()
    for part, n in [("train", 20000), ("t10k", 10)]:
        write_idx(folder / f"{part}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)), gz=True)
        write_idx(folder / f"{part}-labels-idx1-ubyte.gz", np.arange(n) % 10, gz=True)
    before = torch.get_num_threads()
    loaded = []
    try:
        for threads in (1, 4):
            sources._load_cached.cache_clear()
            torch.set_num_threads(threads)
            loaded.append(sources.load_dataset("fmnist", root=root).train_x)
            assert torch.get_num_threads() == threads   # the caller's count is given back
    finally:
        torch.set_num_threads(before)
    assert torch.equal(loaded[0], loaded[1])
