"""A paper's protocol as objects the engine runs: how clients train locally (``LocalTraining``), who trains
in each round (a ``Participation``), how and when the federation is evaluated (an ``EvaluationPlan``).

The engine knows the general forms; a paper whose protocol differs brings its own object from its own module and
registers it (FedPRP's late-joining clients: ``register_participation("late_clients", ...)`` in
``fedlib.methods.fedprp``), so neither the engine nor the experiment layer changes."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlib.engine.core import PARTICIPATION_SALT, derived_seed


@dataclass(frozen=True)
class LocalTraining:
    """Every client's local training: epochs per round, mini-batch size, step size, optimizer, whether an
    epoch's last mini-batch smaller than ``batch_size`` is skipped (``drop_last``, as torch's DataLoader), and the
    arithmetic of training steps (``precision``: fedlib.engine.training.PRECISIONS)."""
    epochs: int
    batch_size: int
    lr: float
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    drop_last: bool = False
    precision: str = "fp32"


class Participation:
    """Who trains in a round: ``clients(num_clients, seed, round_)`` gives the sorted client ids; deterministic
    in (seed, round), so a resumed run draws the same clients."""

    def clients(self, num_clients: int, seed: int, round_: int) -> list[int]:
        raise NotImplementedError


@dataclass(frozen=True)
class UniformParticipation(Participation):
    """Every client when ``fraction`` is 1, else max(1, round(C m)) clients drawn uniformly each round."""
    fraction: float = 1.0

    def clients(self, num_clients: int, seed: int, round_: int) -> list[int]:
        if self.fraction >= 1.0:
            return list(range(num_clients))
        k = max(1, int(round(self.fraction * num_clients)))
        rng = np.random.default_rng(derived_seed(seed, round_, PARTICIPATION_SALT))
        return sorted(rng.choice(num_clients, size=k, replace=False).tolist())


@dataclass(frozen=True)
class ParticipationSpec:
    """A registered participation: ``build(fields)`` makes it from a config's participation fields (``fraction``
    and the ones it reads); it applies where its ``selected_by`` field is set (the default, "uniform", where no
    other's is); ``check(fields, num_clients, rounds)`` raises a ConfigError on values it cannot run. ``fields``: its
    own config fields and their defaults (a config names them flat, ``make_config(late_clients=10)``; at its default
    a field is left out of the cache key)."""
    name: str
    build: Callable[[dict], Participation]
    selected_by: str | None = None
    check: Callable[[dict, int, int], None] | None = None
    doc: str = ""
    fields: tuple[tuple[str, Any], ...] = ()


PARTICIPATIONS: dict[str, ParticipationSpec] = {}


def register_participation(spec: ParticipationSpec) -> ParticipationSpec:
    PARTICIPATIONS[spec.name] = spec
    return spec


def participation_fields() -> dict[str, Any]:
    """The registered participations' own fields and their defaults ({flat name: default})."""
    return {name: default for spec in PARTICIPATIONS.values() for name, default in spec.fields}


def participation_spec(fields: dict) -> ParticipationSpec:
    """The registered participation a config's participation ``fields`` name: the one whose selecting field is
    set, else "uniform"."""
    chosen = [s for s in PARTICIPATIONS.values() if s.selected_by is not None and fields.get(s.selected_by)]
    if len(chosen) > 1:
        from fedlib.errors import ConfigError

        raise ConfigError("participation", {s.selected_by: fields[s.selected_by] for s in chosen},
                          "at most one participation of its own per run")
    return chosen[0] if chosen else PARTICIPATIONS["uniform"]


register_participation(ParticipationSpec("uniform", lambda f: UniformParticipation(f["fraction"]),
                                         doc="every client, or a fraction drawn uniformly each round"))


@dataclass(frozen=True)
class EvaluationPlan:
    """When and how the federation is evaluated.

    ``metrics``: metric sets (``fedlib.engine.evaluation.METRIC_SETS``) beside the method's own;
    ``global_test_size``: a seeded subset of the test set as the global test (None: all of it);
    ``participants_only``: client models of the last round's participants only (FedPRP's A_loc / A_sel);
    ``average_global``: for a method without a global model, evaluate the uniform average of the evaluated
    clients' models as one (nothing of it is communicated); ``finetune_epochs``: a method without personal
    models is evaluated per client after that many epochs of cross-entropy fine-tuning (pFedCSPC's "Local")."""
    every: int = 1
    metrics: tuple[str, ...] = ("standard",)
    global_test_size: int | None = None
    participants_only: bool = False
    average_global: bool = False
    finetune_epochs: int = 0

    def due(self, t: int, rounds: int) -> bool:
        """Whether the federation is evaluated after round ``t`` (0-based): every ``every`` rounds and last."""
        return (t + 1) % self.every == 0 or t + 1 == rounds
