"""The book-scale learning rate of a chapter, chosen on a held-out split of the training images.

A chapter's book budget is a few short rounds; the paper's learning rate, tuned for hundreds of rounds, can
leave a model at chance there. Each chapter that retunes it names a reference run (``TUNING``: a method, the
arguments of its ``config`` at book scale and the metric its headline table reads). Every rate of ``GRID`` trains
that run on ``<dataset>-heldout`` (the dataset with 10,000 training images held out as the test set, its real
test set unused); the best score wins (ties: the smaller rate; a run that diverges scores nothing). The answer is
written to ``results/tuning/<chapter>.json`` and the chapter's hyperparameter table prints it.

    python -m fedlib tune pfedcspc fedmate fedprp
"""
from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

GRID = (0.01, 0.03, 0.05, 0.1)
CHANCE = 0.1   # every tuned chapter's data has 10 classes


def _root() -> Path:
    from fedlib import results

    return results.RESULTS / "tuning"   # beside the chapters' records (FEDLIB_RESULTS moves both)


def reference_config(study, lr: float):
    """The reference run of ``study`` (a registered chapter, ``registry.study(name)``) at book scale on the
    held-out split, at learning rate ``lr``."""
    from fedlib.errors import ConfigError

    spec, config = study.declared.tuning, study.declared.config
    if spec is None or config is None:
        raise ConfigError("chapter", study.name, "a chapter with a TUNING reference run and its config()")
    cfg = config(spec["method"], scale="book", **spec["args"])
    return dataclasses.replace(cfg, dataset=f"{cfg.dataset}-heldout", lr=lr), spec["metric"]


def tune(study, grid=GRID, root: Path | None = None, progress: bool = True) -> dict:
    """Train the reference run of ``study`` (a registered chapter) at every rate of ``grid``; write and return the
    choice."""
    from fedlib.errors import ConfigError, TrainingDiverged
    from fedlib.experiment.records import code_version
    from fedlib.experiment.runner import run

    chapter = study.name
    if study.declared.tuning is None:
        raise ConfigError("chapter", chapter, "a chapter with a TUNING reference run")
    scores: dict[str, float | None] = {}
    for lr in grid:
        cfg, metric = reference_config(study, lr)
        try:
            scores[str(lr)] = float(run(cfg, progress=progress)["final"][metric])
        except TrainingDiverged:
            scores[str(lr)] = None
    done = {lr: s for lr, s in scores.items() if s is not None}
    if not done:
        raise ConfigError("grid", list(grid), "at least one learning rate whose run does not diverge")
    chosen = max(sorted(done, key=float), key=lambda lr: done[lr])   # max keeps the first (smallest) of ties
    if done[chosen] < 2 * CHANCE:
        raise ConfigError("grid", list(grid), f"a grid with a rate that trains the reference run above twice chance "
                                              f"(the best, {chosen}, reached {100 * done[chosen]:.1f}%: nothing is "
                                              "written)")
    cfg, metric = reference_config(study, float(chosen))
    answer = {"chapter": chapter, "method": study.declared.tuning["method"], "metric": metric,
              "dataset": cfg.dataset, "batch_size": cfg.batch_size, "rounds": cfg.rounds,
              "scores": scores, "chosen": float(chosen), "code_version": code_version(),
              "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
    from fedlib.experiment import atomic_json

    atomic_json((root or _root()) / f"{chapter}.json", answer)
    return answer


def read(chapter: str, root: Path | None = None) -> dict | None:
    """The committed choice of ``chapter`` (None when it was never tuned); a damaged file is one ConfigError
    naming it and how to restore it."""
    import math

    from fedlib.store import read_record

    def valid(answer: dict) -> bool:
        chosen = answer["chosen"]
        return isinstance(chosen, (int, float)) and math.isfinite(chosen) and chosen > 0 \
            and isinstance(answer["scores"], dict)

    return read_record((root or _root()) / f"{chapter}.json", valid, "tuning record", "a tuning record with a "
                       f"positive 'chosen' rate and its 'scores': restore it (git checkout {chapter}.json) or run "
                       f"`python -m fedlib tune {chapter}`")


def summary(answer: dict) -> str:
    """One line: which run chose the rate, on what, with every score."""
    scores = ", ".join(f"{lr}: {'diverged' if s is None else f'{100 * s:.1f}'}" for lr, s in answer["scores"].items())
    return (f"lr {answer['chosen']} chosen on {answer['dataset']} (10,000 training images held out; the test set "
            f"unused) by {answer['method']}'s {answer['metric']} after {answer['rounds']} rounds at batch "
            f"{answer['batch_size']} (%: {scores}); `python -m fedlib tune {answer['chapter']}`")


def chapter_hyperparameters(study, scale: str) -> list[dict]:
    """A chapter's training settings at ``scale`` against the paper's protocol (``settings.hyperparameter_rows``
    on its ``reference_run``), with its ``HYPER_REASONS`` (at reference scale also its ``REFERENCE_REASONS``); at book
    scale the learning rate's reason is the
    committed tuning record, and a rate other than the record's choice needs the chapter's ``LR_OVERRIDE``."""
    from fedlib.studies.settings import hyperparameter_rows

    chapter = study.name
    declared = study.declared
    reasons = dict(declared.hyper_reasons)
    if scale == "reference":
        reasons.update(declared.reference_reasons)
    tuned = read(chapter) if declared.tuning is not None else None
    ours = declared.reference_run(scale)
    if tuned and scale == "book":
        reasons["lr"] = summary(tuned)
        if ours.lr != tuned["chosen"]:
            if not declared.lr_override:
                raise ValueError(f"{chapter}: book lr {ours.lr} is not the tuned {tuned['chosen']} and no LR_OVERRIDE "
                                 "says why")
            reasons["lr"] += f"; {declared.lr_override}"
    return hyperparameter_rows(ours, declared.reference_run("paper"), reasons, scale)
