"""What a chapter states about its runs beside the paper's: how each method is evaluated (in the Evaluator's own
words) and its training settings against the paper's protocol, with a reason for every difference."""
from __future__ import annotations

import dataclasses

from fedlib.studies.report import SCALE_MEANING, cell_text, model_name


# ---------------------------------------------------------------------- evaluation protocol per method
def protocol_rows(configs: dict, reported: dict[str, str]) -> tuple[list[dict], str]:
    """The evaluation protocol per method, one row each, in the Evaluator's own words (``engine.evaluation.
    describe``: the same rule it evaluates by): which model each reported metric reads (``reported``: {column:
    family}), what the client does before evaluation and how a class is predicted. ``configs``: {method label:
    Config}. Returns (rows, a note naming each metric's test set)."""
    from fedlib.engine.evaluation import TEST_SETS, describe, family_parts

    rows = []
    for label, cfg in configs.items():
        method = cfg.built_method()
        said = {column: describe(method, cfg.evaluation.plan(), family, cfg.lr, cfg.local_epochs)
                for column, family in reported.items()}
        row = {"method": label, **{f"{column}: model": d["model"] for column, d in said.items()}}
        row["before evaluation"] = next((d["before evaluation"] for d in said.values()
                                         if d["before evaluation"] != "none"), "none")
        row["prediction"] = next(iter(said.values()))["prediction"]
        rows.append(row)
    sets = "; ".join(f"{column}: {TEST_SETS[family_parts(family)[1]].description}" for column, family in
                     reported.items())
    return rows, f"test sets: {sets}"


# ---------------------------------------------------------------------- hyperparameters: ours against the paper's
HYPER_FIELDS = {"dataset": "data", "data_options": "data options", "model": "model", "partition": "partition",
                "num_clients": "clients",
                "fraction": "clients per round (share)", "rounds": "rounds", "local_epochs": "local epochs",
                "batch_size": "batch", "optimizer": "optimizer", "lr": "learning rate", "momentum": "momentum",
                "weight_decay": "weight decay", "hyper": "method hyperparameters",
                "global_test_size": "balanced test images", "eval_every": "evaluated every (rounds)"}
# why a smaller scale differs from the paper's protocol, unless a chapter says more (its ``HYPER_REASONS``, and at
# reference scale its ``REFERENCE_REASONS``)
BUDGET = "book scale is a smoke run that shows the code trains and decides nothing (paper scale keeps the paper's)"
REFERENCE_BUDGET = ("the reference scale's budget, about 3 CPU-hours per chapter on a 2-core CPU, with a convergence "
                    "check at 3x the rounds (paper scale keeps the paper's)")


def default_reasons(scale: str) -> dict[str, str]:
    """Why a setting at ``scale`` differs from the paper's protocol, where the chapter gives no reason of its own."""
    budget = REFERENCE_BUDGET if scale == "reference" else BUDGET
    return {"partition": "fewer images per client: " + budget, "num_clients": budget, "rounds": budget,
            "local_epochs": budget, "fraction": "more clients per round so that a few rounds see most clients",
            "hyper": "server-side and auxiliary schedules shortened with the rounds: " + budget,
            "global_test_size": "a seeded subset of the test set: " + budget,
            "data_options": "fewer images per domain: " + budget,
            "eval_every": "when the model is evaluated (it changes no training)"}



def _value(v) -> str:
    if isinstance(v, dict):
        name = v.get("name")
        rest = ", ".join(f"{k}={x}" for k, x in v.items() if k != "name")
        return f"{name} ({rest})" if name else (rest or "defaults")
    if isinstance(v, float):
        return f"{v:g}"
    return "all" if v is None else cell_text(v)


def method_hyperparameters(method: str, given: dict) -> dict:
    """Every hyperparameter of ``method`` with the value a run uses (``given`` over its ``Hyper`` defaults), so a
    settings table shows mu, lambda, tau... rather than "defaults"."""
    from fedlib.methods import METHODS

    hyper = METHODS[method].Hyper(**given)
    return {f.name: getattr(hyper, f.name) for f in dataclasses.fields(hyper)}


def hyperparameter_rows(ours, paper, reasons: dict[str, str] | None = None, scale: str = "book") -> list[dict]:
    """One row per training setting of ``HYPER_FIELDS``: ours (a Config at the page's ``scale``) against the
    paper's protocol (the same run at paper scale) and, where they differ, why (``reasons`` over
    ``default_reasons(scale)``; at ci scale every difference is the code test's). A difference without a reason raises
    (tested for every chapter)."""
    why = {**default_reasons(scale), **(reasons or {})}
    if scale == "ci":
        why = {key: SCALE_MEANING["ci"] for key in HYPER_FIELDS}
    mine, theirs = ours.flat(), paper.flat()
    for cfg in (mine, theirs):
        cfg["hyper"] = method_hyperparameters(cfg["method"], cfg["hyper"]) or "none (the method has none)"
        if cfg.get("model") is None:   # the model the run builds (on frozen backbones: the projection network)
            cfg["model"] = f"{model_name(cfg)} (" + ("on the frozen backbones' features" if cfg.get("backbones")
                                                      else "the data's default") + ")"
    rows = []
    for key, label in HYPER_FIELDS.items():
        a, b = _value(mine.get(key)), _value(theirs.get(key))
        if a != b and not why.get(key):
            raise ValueError(f"{label}: {a} here, {b} in the paper's protocol, and no reason given")
        rows.append({"setting": label, "here": a, "paper's protocol": b, "why they differ": why[key] if a != b else ""})
    return rows
