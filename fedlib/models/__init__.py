"""The papers' models, each split into body (feature extractor), projector and head (classifier).

Parameter names start with ``body.``, ``projector.`` or ``head.``; methods select parts by prefix.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from fedlib.errors import ConfigError

PARTS = ("body", "projector", "head")
# Tensors a method trains beside the network (FedPRP's margins, FedRoD's personal head) live in the
# client's parameter dict under "extra.<name>": optimised by the engine like the model's parameters when
# a phase lists "extra" among its trainable parts, private to the client unless a method shares them.
EXTRA = "extra"


class SplitModel(nn.Module):
    """body -> projector -> head. ``features`` is the projector output (the prototype space)."""

    def __init__(self, body: nn.Module, feature_dim: int, num_classes: int, projector: nn.Module | None = None,
                 projector_dim: int | None = None, head: nn.Module | None = None):
        super().__init__()
        self.body = body
        self.projector = projector if projector is not None else nn.Identity()
        self.feature_dim = projector_dim or feature_dim
        self.head = head if head is not None else nn.Linear(self.feature_dim, num_classes)

    def forward_features(self, x: torch.Tensor, from_features: bool = False):
        """(features z, logits, encoder output h); ``from_features``: x is already the body's output."""
        h = x if from_features else self.body(x)
        z = self.projector(h)
        return z, self.head(z), h

    def forward(self, x: torch.Tensor, with_features: bool = False, from_features: bool = False):
        z, logits, h = self.forward_features(x, from_features)
        return (z, logits, h) if with_features else logits


def _conv_stack(in_ch: int, channels: list[int], size: int, kernel: int = 5) -> tuple[nn.Sequential, int]:
    """conv(k) -> maxpool(2) -> ReLU per channel count: the papers' conv -> ReLU -> pool, bitwise
    (ReLU is monotone, so it commutes with max, gradients included), with the ReLU on a quarter of the
    values. Inputs too small for unpadded convs (e.g. 8x8 digits) get 'same' padding; returns the
    stack and its flattened output size."""
    layers, ch = [], in_ch
    pad = 0
    if size - len(channels) * (kernel - 1) < 2 ** len(channels):  # would collapse to nothing
        pad = kernel // 2
    for out in channels:
        layers += [nn.Conv2d(ch, out, kernel, padding=pad), nn.MaxPool2d(2), nn.ReLU()]
        ch = out
        size = (size + 2 * pad - kernel + 1) // 2
    if size < 1:
        raise ConfigError("model", f"{len(channels)}-conv CNN", f"inputs of at least {2 ** len(channels)} pixels")
    return nn.Sequential(*layers, nn.Flatten()), ch * size * size


def cnn2(input_shape, num_classes: int) -> SplitModel:
    """FedGPA 5.1.1 (FMNIST/EMNIST): conv16-conv32 (5x5, max-pool) -> fc128 | head fc K."""
    convs, flat = _conv_stack(input_shape[0], [16, 32], input_shape[1])
    return SplitModel(nn.Sequential(convs, nn.Linear(flat, 128), nn.ReLU()), 128, num_classes)


def cnn_pac(input_shape, num_classes: int) -> SplitModel:
    """FedPAC's official FMNIST CNN: conv16 (5x5) -> pool -> conv32 (5x5, padding 1) -> pool -> fc128 | head fc K,
    leaky ReLU after each layer (pool and leaky ReLU commute, both monotone); 117,066 parameters on 28x28 images
    against ``cnn2``'s 80,202."""
    size = ((input_shape[1] - 4) // 2 + 2 - 4) // 2
    body = nn.Sequential(nn.Conv2d(input_shape[0], 16, 5), nn.MaxPool2d(2), nn.LeakyReLU(),
                         nn.Conv2d(16, 32, 5, padding=1), nn.MaxPool2d(2), nn.LeakyReLU(), nn.Flatten(),
                         nn.Linear(32 * size * size, 128), nn.LeakyReLU())
    return SplitModel(body, 128, num_classes)


def cnn3(input_shape, num_classes: int) -> SplitModel:
    """FedGPA 5.1.1 (CIFAR-10/CINIC-10/CIFAR-100): conv16-conv32-conv64 -> fc128 | head fc K.

    The three convolutions use 3x3 kernels so that a 32x32 input survives three poolings."""
    convs, flat = _conv_stack(input_shape[0], [16, 32, 64], input_shape[1], kernel=3)
    return SplitModel(nn.Sequential(convs, nn.Linear(flat, 128), nn.ReLU()), 128, num_classes)


def cnn_fedavg(input_shape, num_classes: int) -> SplitModel:
    """McMahan et al.'s MNIST CNN: conv32-conv64 (5x5, max-pool) -> fc512 | head fc K."""
    convs, flat = _conv_stack(input_shape[0], [32, 64], input_shape[1])
    return SplitModel(nn.Sequential(convs, nn.Linear(flat, 512), nn.ReLU()), 512, num_classes)


def cnn_cspc(input_shape, num_classes: int) -> SplitModel:
    """pFedCSPC's CIFAR-10 model: encoder of two 5x5 convs (6, 16 channels) with 2x2 max-pool and
    two ReLU FC layers (120, 84); projector a 2-layer MLP (84 -> 84 -> 256, as in MOON, which the
    paper follows); classifier one linear layer. Channel and width numbers are MOON's: the paper
    gives none."""
    convs, flat = _conv_stack(input_shape[0], [6, 16], input_shape[1])
    body = nn.Sequential(convs, nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
    projector = nn.Sequential(nn.Linear(84, 84), nn.ReLU(), nn.Linear(84, 256))
    return SplitModel(body, 84, num_classes, projector=projector, projector_dim=256)


def resnet18(input_shape, num_classes: int) -> SplitModel:
    """torchvision ResNet-18 (random init) without its fc as body; linear head on 512 features."""
    import torchvision

    net = torchvision.models.resnet18(weights=None)
    if input_shape[0] != 3:
        net.conv1 = nn.Conv2d(input_shape[0], 64, 7, 2, 3, bias=False)
    net.fc = nn.Identity()
    return SplitModel(net, 512, num_classes)


def resnet18_cspc(input_shape, num_classes: int) -> SplitModel:
    """pFedCSPC's model for CIFAR-100, Tiny-ImageNet and VireoFood172: ResNet-18 without its fc as encoder,
    a 2-layer MLP projector (512 -> 512 -> 256, MOON's) and a linear classifier."""
    import torchvision

    net = torchvision.models.resnet18(weights=None)
    if input_shape[0] != 3:
        net.conv1 = nn.Conv2d(input_shape[0], 64, 7, 2, 3, bias=False)
    net.fc = nn.Identity()
    projector = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256))
    return SplitModel(net, 512, num_classes, projector=projector, projector_dim=256)


class L2Normalize(nn.Module):
    def forward(self, x):
        return nn.functional.normalize(x, dim=1)


def projection(input_shape, num_classes: int, dim: int = 256) -> SplitModel:
    """FedPCL's projection network on frozen backbone features: fc -> ReLU -> L2 normalisation
    (as in its official code), output 256-d; the baselines add a linear classifier on top."""
    return SplitModel(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), dim), nn.ReLU(), L2Normalize()),
                      dim, num_classes)


def projection_fc(input_shape, num_classes: int, dim: int = 256) -> SplitModel:
    """FedPCL's projection read as the paper words it ("one fully connected layer"): fc -> L2 normalisation, no
    ReLU (the official code's ReLU lets a sample's projection become all-zero, see the FedPCL chapter)."""
    return SplitModel(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), dim), L2Normalize()),
                      dim, num_classes)


def projection_official_head(input_shape, num_classes: int, dim: int = 256) -> SplitModel:
    """FedPCL's projection with the classifier its official code gives the baselines (Solo, FedAvg, ...):
    logits = normalize(relu(fc z)), so each logit lies in [0, 1] and the logits have unit norm (cross-entropy cannot
    fall below log(e + K - 1) - 1, 1.46 for K = 10); the book's baselines use a plain linear head."""
    return SplitModel(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), dim), nn.ReLU(), L2Normalize()),
                      dim, num_classes, head=nn.Sequential(nn.Linear(dim, num_classes), nn.ReLU(), L2Normalize()))


def mlp(input_shape, num_classes: int, hidden: int = 128) -> SplitModel:
    return SplitModel(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU()),
                      hidden, num_classes)


MODELS = {"cnn2": cnn2, "cnn_pac": cnn_pac, "cnn3": cnn3, "cnn_fedavg": cnn_fedavg, "cnn_cspc": cnn_cspc,
          "resnet18": resnet18, "resnet18_cspc": resnet18_cspc,
          "mlp": mlp, "projection": projection, "projection_fc": projection_fc,
          "projection_official_head": projection_official_head}
DEFAULT_MODEL = {"fmnist": "cnn2", "mnist": "cnn2", "emnist": "cnn2", "digits": "cnn2", "usps": "cnn2",
                 "cifar10": "cnn3", "cifar100": "cnn3", "svhn": "cnn3", "digit4": "cnn3"}


def build_model(name: str | None, input_shape, num_classes: int, dataset: str | None = None) -> SplitModel:
    """``name`` None: the dataset's default (``projection`` for feature vectors)."""
    if name is None:
        name = "projection" if len(input_shape) == 1 else DEFAULT_MODEL.get(dataset or "", "cnn2")
    if name not in MODELS:
        raise ConfigError("model", name, f"one of {', '.join(MODELS)}")
    return MODELS[name](tuple(input_shape), num_classes)


def part_of(param_name: str) -> str:
    return param_name.split(".", 1)[0]


def network_params(params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of a parameter dict that belong to the network (no ``extra.*`` tensors)."""
    return {k: v for k, v in params.items() if part_of(k) != EXTRA}
