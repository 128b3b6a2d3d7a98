"""A validated config wired into a Federation: seeds, data (features of frozen backbones), model, method."""
from __future__ import annotations

import functools
import json
import random
import threading

import numpy as np
import torch

from fedlib.errors import ConfigError, check
from fedlib.experiment.config import DEFAULT_CACHE, Config

# the process-wide generators are seeded and read (a model's initial weights) under this lock: two runs started in
# two threads of one process each get their own seed's weights (training itself draws from per-client generators)
SEEDED = threading.RLock()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_data(cfg: Config):
    """The config's dataset (features of its frozen backbones, if any) in memory."""
    from fedlib.data import load_dataset

    data = load_dataset(cfg.dataset, **cfg.data_options)
    if cfg.backbones:
        from fedlib.backbones import featurize

        data = featurize(data, list(cfg.backbones), cache_dir=DEFAULT_CACHE, input_size=cfg.backbone_input)
    return data


def client_sizes(cfg: Config) -> tuple[int, ...]:
    """How many training samples each client of the run holds (its partition, without loading more than labels)."""
    return _client_sizes(cfg.dataset, json.dumps(cfg.data_options, sort_keys=True),
                         json.dumps(cfg.partition, sort_keys=True, default=str), cfg.num_clients, cfg.seed)


def training_steps(cfg: Config) -> int:
    """The local steps a run makes: per client, its share of the training set over the batch size (rounded up, or
    down with ``drop_last``, which keeps the one batch of a client smaller than a batch), times the local epochs, the
    rounds and the share of clients taking part (expected)."""
    per_epoch = sum(max(n // cfg.batch_size, 1) if cfg.drop_last else -(-n // cfg.batch_size)
                    for n in client_sizes(cfg) if n)
    return round(per_epoch * cfg.local_epochs * cfg.rounds * cfg.participation.fraction)


def training_samples(cfg: Config, sizes: list[int] | None = None) -> float:
    """The training samples a run's clients process: their shares of the training set (``sizes``, e.g. from a
    record's ``train_counts``; else from the partition), times the local epochs, the rounds and the share of clients
    taking part (expected)."""
    held = client_sizes(cfg) if sizes is None else sizes
    return sum(held) * cfg.local_epochs * cfg.rounds * cfg.participation.fraction


@functools.lru_cache(maxsize=64)
def _client_sizes(dataset: str, data_options: str, partition: str, num_clients: int, seed: int) -> tuple[int, ...]:
    from fedlib.data import load_dataset
    from fedlib.data.partition import partition_with_server

    data = load_dataset(dataset, **json.loads(data_options))
    parts, _ = partition_with_server(data.train_y.numpy(), data.num_classes, num_clients, json.loads(partition), seed,
                                     None if data.train_domain is None else data.train_domain.numpy())
    return tuple(len(p) for p in parts)


def free_memory(device: str) -> int:
    """Bytes the device can still hand out: CUDA's free memory, or the kernel's MemAvailable on the CPU."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    from fedlib.engine.workers import available_memory

    return available_memory()


def check_allocation(method, num_classes: int, feature_dim: int, model_bytes: int, cfg: Config) -> None:
    """Refuse a hyperparameter whose tensors cannot fit in the device's free memory, with the figures,
    before anything is allocated (instead of an allocator crash deep inside PyTorch)."""
    free = free_memory(cfg.device)
    slots = cfg.num_clients * model_bytes   # every client slot keeps its own copy of the model (engine.loop)
    check(slots <= free, "num_clients", cfg.num_clients,
          f"a number of clients whose models fit in memory: {cfg.num_clients:,} copies of a "
          f"{model_bytes / 2**20:,.1f} MiB model need {slots / 2**30:,.1f} GiB, {cfg.device} has "
          f"{free / 2**30:,.1f} GiB free")
    sizes = method.allocation(num_classes, feature_dim, cfg.num_clients, model_bytes)
    for name, need in sizes.items():
        if need > free:
            raise ConfigError(f"hyper.{name}", getattr(method.hp, name),
                              f"a value whose tensors fit in memory: it needs {need / 2**30:,.1f} GiB, "
                              f"{cfg.device} has {free / 2**30:,.1f} GiB free")


def build(cfg: Config, progress: bool = False, checkpoint=None, desc: str = "", executor=None, data=None,
          method=None):
    """Data, model, method and the Federation for a validated config. ``executor``: a factory
    ``(setup, trainer) -> executor`` used instead of ``cfg.executor`` (the Flower engine's); ``data``
    (``load_data``'s, possibly already on the device) and ``method``: shared with other runs (run-batched grids)."""
    from fedlib.data import federate
    from fedlib.engine.loop import Federation
    from fedlib.models import build_model

    with SEEDED:
        seed_everything(cfg.seed)
        data = load_data(cfg) if data is None else data
        fed = federate(data, cfg.num_clients, cfg.partition, cfg.seed, device=cfg.device)
        seed_everything(cfg.seed)
        model = build_model(cfg.model, data.input_shape, data.num_classes, cfg.dataset).to(cfg.device)
        method = cfg.built_method() if method is None else method
        check_allocation(method, data.num_classes, model.feature_dim,
                         sum(p.numel() * p.element_size() for p in model.parameters()), cfg)
        return Federation(fed, model, method, seed=cfg.seed, rounds=cfg.rounds, training=cfg.local_training(),
                          participation=cfg.participation.schedule(), evaluation=cfg.evaluation.plan(),
                          executor=executor or cfg.executor, executor_options={"workers": cfg.workers},
                          checkpoint=checkpoint, progress=progress, desc=desc)
