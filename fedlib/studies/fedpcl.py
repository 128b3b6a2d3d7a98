"""The FedPCL chapter's experiments on the offline ``digit4`` benchmark and frozen backbones.

Paper numbers are transcribed from Tan et al. (NeurIPS 2022), Tables 1, 2, 4, 5 and 6
(Digit-5, test accuracy %, mean (std) over 3 runs).
"""
from __future__ import annotations

from fedlib.errors import check
from fedlib.experiment import Config, make_config
from fedlib.studies.common import fmt, mean_std, run_all, with_seeds  # noqa: F401  (the chapter uses them)

SINGLE = ["effnet_lite0"]
MULTI = ["effnet_lite0", "effnet_lite1", "effnet_lite2"]
BACKBONE_SETS = {  # Table 4 analogue
    "EfficientNet-Lite0/1/2 (ImageNet)": MULTI,
    "ccexam CNNs (MNIST, USPS, SVHN)": ["cnn_mnist", "cnn_usps", "cnn_svhn"],
    "mixed: EffNet-Lite0 + SVHN CNN + USPS CNN": ["effnet_lite0", "cnn_svhn", "cnn_usps"],
}
METHODS = ["fedavg", "pfedme", "perfedavg", "fedrep", "fedproto", "local", "fedpcl"]
LABELS = {"fedavg": "FedAvg", "pfedme": "pFedMe", "perfedavg": "Per-FedAvg", "fedrep": "FedRep",
          "fedproto": "FedProto", "local": "Solo", "fedpcl": "FedPCL"}

# Table 2: method -> {"s"|"m": (MNIST, MNIST-M, Synth, Avg over 5 domains, communicated params)}
PAPER_T2 = {
    "fedavg": {"s": (70.65, 29.33, 32.90, 44.04, 133632), "m": (71.68, 33.70, 37.35, 46.83, 395776)},
    "pfedme": {"s": (71.13, 25.25, 36.25, 43.00, 133632), "m": (67.45, 31.80, 33.55, 42.78, 395776)},
    "perfedavg": {"s": (52.68, 24.38, 29.05, 35.21, 133632), "m": (56.03, 30.98, 34.90, 39.30, 395776)},
    "fedrep": {"s": (64.00, 31.90, 36.50, 44.14, 131072), "m": (77.25, 36.53, 37.63, 49.61, 393216)},
    "fedproto": {"s": (80.40, 32.85, 40.90, 51.93, 2560), "m": (83.78, 36.43, 43.70, 54.71, 2560)},
    "local": {"s": (60.40, 28.48, 34.65, 42.88, None), "m": (70.43, 34.35, 37.18, 48.37, None)},
    "fedpcl": {"s": (82.75, 33.05, 41.40, 52.83, 2560), "m": (84.65, 37.25, 44.73, 55.34, 2560)},
}
PAPER_T5 = {"ce": 32.98, "ce_protodist": 43.94, "supcon": 42.18, "pcl": 45.22}
PAPER_T6 = {  # prototypes used -> (feature shift, label shift, feature & label shift)
    "global only": (54.69, 44.75, 43.79), "local only": (55.01, 44.52, 43.08), "global and local": (55.34, 45.35, 45.22)}
PAPER_T4_DIGIT5 = {"[ResNet18-QuickDraw, -Aircraft, -Birds]": 42.87, "[MLP, AlexNet, VGG11 (ImageNet)]": 55.80,
                   "[tiny, small, base ViT (ImageNet)]": 40.96}
PAPER_T1 = {"from scratch (ResNet18)": ("11M", 0.95, 31.75), "1 pre-trained model": ("0.13M", 0.31, 38.65),
            "3 pre-trained models": ("0.40M", 0.64, 40.47)}

SCALES = {
    "ci": dict(n_train=60, n_test=30, rounds=2, seeds=[0], sweep_seeds=[0], clients=[5, 10, 20]),
    "book": dict(n_train=400, n_test=200, rounds=10, seeds=[0, 1], sweep_seeds=[0], clients=[5, 10, 20, 40, 80]),
    "paper": dict(n_train=2000, n_test=500, rounds=50, seeds=[0, 1, 2], sweep_seeds=[0, 1, 2],
                  clients=[5, 10, 20, 40, 80]),
}

# name -> (partition spec, clients): FedPCL Section 5.1 with our four domains
SETTINGS = {
    "feature shift": ({"name": "domains", "test_fraction": 0.5}, 4),
    "label shift": ({"name": "dirichlet", "alpha": 1.0, "min_size": 2}, 4),
    "feature & label shift": ({"name": "domains", "alpha": 1.0, "min_size": 5, "test_fraction": 0.5}, 8),
}


def scale_info(scale: str) -> dict:
    check(scale in SCALES, "scale", scale, f"one of {', '.join(SCALES)}")
    return SCALES[scale]


def config(method: str, setting: str, backbones, scale: str, seed: int = 0, hyper: dict | None = None,
           partition: dict | None = None, num_clients: int | None = None, rounds: int | None = None,
           model: str | None = None) -> Config:
    """FedPCL Section 5.1: Adam lr 1e-3, weight decay 1e-4, batch 32, E = 1, tau = 0.07."""
    sc = scale_info(scale)
    spec, clients = SETTINGS[setting]
    return make_config(method=method, dataset="digit4", data_options={"n_train": sc["n_train"], "n_test": sc["n_test"]},
                       backbones=list(backbones) if backbones else None, partition=dict(partition or spec),
                       num_clients=num_clients or clients, rounds=rounds or sc["rounds"], local_epochs=1,
                       batch_size=32, lr=1e-3, optimizer="adam", weight_decay=1e-4, eval_every=max(1, (rounds or sc["rounds"]) // 5),
                       hyper=dict(hyper or {}), seed=seed, model=model)
