"""A validated config wired into a Federation: seeds, data (features of frozen backbones), model, method."""
from __future__ import annotations

import random

import numpy as np
import torch

from fedlib.experiment.config import DEFAULT_CACHE, Config


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


def build(cfg: Config, progress: bool = False, checkpoint=None, desc: str = "", executor=None, data=None,
          method=None):
    """Data, model, method and the Federation for a validated config. ``executor``: a factory
    ``(setup, trainer) -> executor`` used instead of ``cfg.executor`` (the Flower engine's); ``data``
    (``load_data``'s, possibly already on the device) and ``method``: shared with other runs (run-batched grids)."""
    from fedlib.data import federate
    from fedlib.engine.loop import Federation
    from fedlib.methods import make_method
    from fedlib.models import build_model

    seed_everything(cfg.seed)
    data = load_data(cfg) if data is None else data
    fed = federate(data, cfg.num_clients, cfg.partition, cfg.seed, device=cfg.device)
    seed_everything(cfg.seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes, cfg.dataset).to(cfg.device)
    method = make_method(cfg.method, **cfg.hyper) if method is None else method
    return Federation(fed, model, method, seed=cfg.seed, rounds=cfg.rounds, training=cfg.local_training(),
                      participation=cfg.participation.schedule(), evaluation=cfg.evaluation.plan(),
                      executor=executor or cfg.executor, executor_options={"workers": cfg.workers},
                      checkpoint=checkpoint, progress=progress, desc=desc)
