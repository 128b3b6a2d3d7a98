"""Command line: ``python -m fedlib run|list|book``.

Examples:
  python -m fedlib run --method fedavg fedproto fedpac --dataset fmnist --partition skew s=20 setting=1 \\
      --clients 20 --budget short --seeds 0 1
  python -m fedlib run --method fedgpa --hp mu=0.4 --set lr=0.05 rounds=30
  python -m fedlib run --method fedproto --dataset digits --engine flower   # through Flower's simulation runtime
  python -m fedlib list
  python -m fedlib records fedgpa --workers 8   # paper-scale grid -> results/fedgpa/ (a GPU is advised)
  python -m fedlib records fedgpa --scale reference --workers 2   # the reference scale (on the CPU)
  python -m fedlib book            # execute the notebooks of book/experiments.yml and build the book
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import json
import re
import sys

from fedlib.errors import (
    ClientFailed,
    ConfigError,
    DataNotFoundError,
    LockHeld,
    NotebookFailed,
    StorageFailed,
    TrainingDiverged,
    WorkerDied,
)

NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")   # what Python reads as a number, JSON or not


def _value(text: str):
    """Parse a command-line value as JSON when possible (numbers, lists, booleans), else a number as Python writes
    it (``.05``, ``+0.05``), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if NUMBER.fullmatch(text):
            return float(text) if any(c in text for c in ".eE") else int(text)
        return {"True": True, "False": False, "None": None}.get(text, text)


def _pairs(items: list[str], what: str) -> dict:
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(what, item, "key=value pairs")
        key, value = item.split("=", 1)
        if key.strip() in out:   # only the last would be checked and used
            raise ConfigError(f"{what} {key.strip()}", item, "each key once")
        out[key.strip()] = _value(value.strip())
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fedlib", description="fedlib: personalized federated learning")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one or more methods over seeds and print a table")
    run.add_argument("--method", nargs="+", default=["fedavg"], help="method name(s), see `list`")
    run.add_argument("--dataset", default="fmnist")
    run.add_argument("--partition", nargs="+", default=["skew", "s=20", "setting=1"], metavar="NAME [k=v ...]",
                     help="partition name followed by its parameters")
    run.add_argument("--clients", type=int, default=20, dest="num_clients")
    run.add_argument("--budget", default="short", help="smoke (2 rounds, 1 epoch) | short (10 rounds, 1 epoch) | "
                     "full (the config as given); a chapter's ci/book/paper scales are the notebooks' parameter")
    run.add_argument("--scale", default=None, help=argparse.SUPPRESS)   # refused with a pointer to --budget
    run.add_argument("--seeds", nargs="+", type=int, default=[0])
    run.add_argument("--hp", nargs="*", default=[], metavar="k=v", help="method hyperparameters")
    run.add_argument("--set", nargs="*", default=[], metavar="k=v", help="any other config field (lr, rounds, ...)")
    run.add_argument("--device", default="cpu")
    run.add_argument(
        "--executor",
        default="sequential",
        help="sequential | process | batched: how a round's clients train: one after another (reference), "
        "in CPU worker processes, "
        "or together with torch.func on one device",
    )
    run.add_argument("--workers", type=int, default=None, help="worker processes of --executor process")
    run.add_argument("--engine", default="inprocess",
                     help="inprocess | flower: clients trained by this process, or on Flower nodes of a simulation "
                          "(Ray; needs the 'flower' extra)")
    run.add_argument("--download", action="store_true", help="let torchvision download online datasets")
    run.add_argument("--cache", default=None, help="result cache folder (default .fedlib-cache); 'none' disables")
    run.add_argument("--out", default=None, help="write the result records of all runs to this JSON file")
    run.add_argument("--no-progress", action="store_true")
    rec = sub.add_parser("records", help="run a chapter's reference- or paper-scale grid and write its records to "
                                         "results/<chapter>/")
    rec.add_argument("chapter", help="a chapter with tables(scale) in fedlib/studies (e.g. fedgpa)")
    rec.add_argument("--scale", default="paper", help="reference | paper: the paper's protocol at a converged shorter "
                                                      "budget, or at the paper's budget")
    rec.add_argument("--device", default="auto", help="cuda | cpu | auto (cuda when visible)")
    rec.add_argument("--executor", default="auto", help="sequential | process | batched | auto (batched on a GPU)")
    rec.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes at once, each a run-batched group (batched) or one run (several share one GPU well)",
    )
    rec.add_argument("--max-runs", type=int, default=None,
                     help="at most this many runs in one batched step (default: every run that can share it)")
    rec.add_argument("--deadline", type=float, default=None, help="seconds: start no run that would end later")
    rec.add_argument(
        "--seeds", nargs="+", type=int, default=None, help="these seeds in every table (default: the paper's)"
    )
    rec.add_argument("--tables", nargs="+", default=None, help="only these tables (default: all, the headline first)")
    rec.add_argument("--precision", default="fp32",
                     help="fp32 | bf16 | tf32: the arithmetic of the training steps (records of another precision than "
                          "fp32 have their own keys: the chapter compares them with the fp32 records)")
    tune = sub.add_parser("tune", help="choose a chapter's book-scale learning rate on a held-out split of the "
                                       "training images; writes results/tuning/<chapter>.json")
    tune.add_argument("chapters", nargs="+", help="chapters whose study names a TUNING run (pfedcspc, fedmate, fedprp)")
    tune.add_argument("--lrs", nargs="+", type=float, default=None, help="the grid (default: 0.01 0.03 0.05 0.1)")
    timed = sub.add_parser("timing", help="time a round of each method a chapter's efficiency claims name, side by "
                                          "side on this machine; writes results/timing/<chapter>.json")
    timed.add_argument("chapter", help="a chapter whose study names its timing_runs (fedgpa)")
    timed.add_argument("--repeats", type=int, default=5, help="timed rounds of each method (after one untimed)")
    timed.add_argument("--device", default="cpu")
    timed.add_argument("--executor", default="sequential", help="sequential | process | batched, for every method")
    sub.add_parser("list", help="methods, datasets, partitions, models and scales with their parameters")
    book = sub.add_parser("book", help="execute the notebooks of the manifest with papermill, then build the book")
    book.add_argument("--manifest", default="book/experiments.yml")
    book.add_argument("--config", default=None, help="only this named configuration (e.g. ci, book)")
    book.add_argument("--no-build", action="store_true", help="execute notebooks only")
    book.add_argument("--pdf", action="store_true", help="also the whole book as one PDF, book/_build/pdf/book.pdf "
                                                         "(printed by headless Chromium: apt-get install chromium)")
    return parser


def default_of(field) -> str:
    """A dataclass field's default as the user would type it (a factory's value, e.g. {} for a dict)."""
    import dataclasses as dc

    if field.default is not dc.MISSING:
        return repr(field.default) if isinstance(field.default, str) else str(field.default)
    if field.default_factory is not dc.MISSING:
        return str(field.default_factory())
    return "(required)"


def cmd_list() -> None:
    import dataclasses as dc

    from fedlib.data.partition import COMMON_PARAMS, PARTITIONERS
    from fedlib.data.sources import COMPOSITES, SOURCES
    from fedlib.experiment import BUDGETS
    from fedlib.methods import METHODS
    from fedlib.models import MODELS

    print("methods:")
    for name, cls in METHODS.items():
        hp = ", ".join(f"{f.name}={default_of(f)}" for f in dc.fields(cls.Hyper)) or "-"
        print(f"  {name:10s} {cls.paper:38s} hyper: {hp}")
    print("datasets:")
    for name, src in SOURCES.items():
        print(
            f"  {name:10s} {src.num_classes:4d} classes  {'offline' if src.offline else 'online (torchvision files)'}"
        )
    for name, build in COMPOSITES.items():
        options = ", ".join(f"{k}={v.default}" for k, v in inspect.signature(build).parameters.items()) or "-"
        print(f"  {name:10s} built offline from the datasets above; data_options: {options}")
    print("partitions:")
    for name, p in PARTITIONERS.items():
        params = ", ".join(f"{k}: {v}" for k, v in p.params.items()) or "-"
        print(f"  {name:10s} {p.doc}; {params}")
    print("  (any)      " + "; ".join(f"{k}: {v}" for k, v in COMMON_PARAMS.items()))
    print("models:   " + ", ".join(MODELS))
    print("budgets:  " + "; ".join(f"{k}: {v or 'the config as given'}" for k, v in BUDGETS.items())
          + " (fedlib run --budget; a chapter's ci/book/paper scale is its notebook's `scale` parameter)")


def cmd_run(args) -> int:
    from fedlib.experiment import DEFAULT_CACHE, make_config, run, summarize_runs, validate
    from fedlib.plots import results_table

    if args.scale is not None:
        raise ConfigError("--scale", args.scale, "no such option on the command line: a scale (ci, book, paper) is a "
                                                 "chapter's budget, set by its notebook's `scale` parameter; "
                                                 "use --budget smoke | short | full here")
    if args.download:
        import os

        os.environ["FEDLIB_DOWNLOAD"] = "1"
    partition = {"name": args.partition[0], **_pairs(args.partition[1:], "--partition")}
    settings = _pairs(args.set, "--set")
    for key, option in (("seed", "--seeds"), ("hyper", "--hp"), ("method", "--method"), ("dataset", "--dataset"),
                        ("partition", "--partition"), ("num_clients", "--clients"), ("device", "--device"),
                        ("executor", "--executor"), ("workers", "--workers"), ("engine", "--engine")):
        if key in settings:
            raise ConfigError(f"--set {key}", settings[key], f"a config field other than {key}: use {option} for it")
    check_distinct(args.seeds, "--seeds")
    base = dict(dataset=args.dataset, partition=partition, num_clients=args.num_clients, device=args.device,
                executor=args.executor, workers=args.workers, engine=args.engine)
    base.update(settings)
    hyper = _pairs(args.hp, "--hp")
    configs = [make_config(method=method, hyper=hyper_for(method, hyper, len(args.method) > 1), **base)
               for method in args.method]
    configs = [cfg.with_budget(args.budget).updated(**settings) for cfg in configs]
    for cfg in configs:
        for seed in args.seeds:   # every run's config is checked before the first one trains
            validate(dataclasses.replace(cfg, seed=seed))
    if len(args.method) > 1:
        check_hyper_used(args.method, hyper)
    cache = None if args.cache == "none" else (args.cache or DEFAULT_CACHE)
    if cache is not None:
        check_writable_folder(cache, "--cache")
    if args.out is not None:
        check_writable_file(args.out, "--out")
    from fedlib.data import load_dataset

    load_dataset(args.dataset)  # fail early on missing files
    rows, records = {}, []
    for cfg in configs:
        runs = [run(dataclasses.replace(cfg, seed=s), cache_dir=cache, progress=not args.no_progress,
                    desc=f"{cfg.method} seed {s}") for s in args.seeds]
        records += runs
        rows[cfg.method] = (summarize_runs(runs), sum(r["wall_time_s"] for r in runs))
    print(f"\n{args.dataset}, partition {partition}, {args.num_clients} clients, budget {args.budget} "
          f"(rounds {configs[0].rounds}, E {configs[0].local_epochs}), seeds {args.seeds}; "
          "last-round values, mean ± std over seeds")
    print(results_table(rows))
    if args.out:   # a complete file replaces an existing one, or nothing changes
        from pathlib import Path

        from fedlib.experiment import atomic_json

        try:
            atomic_json(Path(args.out), records)
        except StorageFailed:
            raise StorageFailed(f"--out {args.out} could not be written; every run's record is in the cache: the "
                                "same command again writes it without training") from None
    return 0


def hyper_names(method: str) -> set[str]:
    """The hyperparameters a method declares (its ``Hyper`` dataclass); an unknown method is refused."""
    from fedlib.methods import METHODS

    if method not in METHODS:
        raise ConfigError("method", method, f"one of {', '.join(METHODS)}")
    return {f.name for f in dataclasses.fields(METHODS[method].Hyper)}


def hyper_for(method: str, hyper: dict, several: bool) -> dict:
    """The ``--hp`` values a method takes: with several methods, each gets those of its own hyperparameters;
    a value that none of them has is refused (never silently dropped)."""
    if not several:
        return hyper
    names = hyper_names(method)
    return {k: v for k, v in hyper.items() if k in names}


def check_hyper_used(methods: list[str], hyper: dict) -> None:
    for key, value in hyper.items():
        if not any(key in hyper_names(m) for m in methods):
            raise ConfigError(f"hyper.{key}", value, f"a hyperparameter of at least one of {', '.join(methods)}")


def check_writable_folder(path, option: str) -> None:
    """Refuse a folder that cannot be created or written, before any training."""
    import os
    import tempfile
    from pathlib import Path

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ConfigError(option, os.fspath(path), f"a folder fedlib can create and write ({exc.strerror})") from None


def check_writable_file(path, option: str) -> None:
    """Refuse a file that cannot be written (a folder, a name too long, no permission, an immutable file),
    before any training; a file that did not exist is not left behind."""
    import os
    from pathlib import Path

    target = Path(path)
    if os.fspath(path).strip() == "" or os.fspath(path).endswith(("/", os.sep)):   # Path("x/") is "x"
        raise ConfigError(option, os.fspath(path), "a file path (a name, not empty and not ending in '/')")
    try:
        if target.is_dir():
            raise ConfigError(option, os.fspath(path), "a file path (this is a folder)")
        check_writable_folder(target.resolve().parent, option)
        existed = target.exists()
        with open(target, "a"):
            pass
        if not existed:
            target.unlink()
    except OSError as exc:
        raise ConfigError(option, os.fspath(path), f"a file fedlib can write ({exc.strerror})") from None


def check_distinct(seeds, option: str) -> None:
    """Refuse a seed given twice (it would run, or be counted, twice)."""
    if seeds is not None:
        repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
        if repeated:
            raise ConfigError(option, list(seeds), f"distinct seeds ({', '.join(map(str, repeated))} given twice)")


def cmd_records(args) -> int:
    import math

    from fedlib.errors import check
    from fedlib.experiment import RECORDED_SCALES
    from fedlib.recording import record_grid, recording_order
    from fedlib.studies.common import Runtime
    from fedlib.studies.registry import study as chapter_study

    study = chapter_study(args.chapter)
    check(args.scale in RECORDED_SCALES, "--scale", args.scale, f"one of {', '.join(RECORDED_SCALES)}")
    runtime = Runtime.chosen(args.device, args.executor)
    check_distinct(args.seeds, "--seeds")
    check(args.workers >= 1, "--workers", args.workers, "a positive number of processes")
    check(args.max_runs is None or args.max_runs >= 1, "--max-runs", args.max_runs, "a positive number of runs")
    check(args.deadline is None or (math.isfinite(args.deadline) and args.deadline > 0), "--deadline", args.deadline,
          "a positive number of seconds")
    configs = recording_order(study.declared.tables(args.scale), args.seeds, args.tables, precision=args.precision)
    from fedlib import results

    check_writable_folder(results.RESULTS / args.chapter, "the committed records' folder")   # before any training
    summary = record_grid(configs, args.chapter,
                          workers=args.workers, deadline_s=args.deadline, device=runtime.device,
                          executor=runtime.executor, max_runs=args.max_runs, scale=args.scale)
    print(
        f"{args.chapter}: {summary['done']} recorded, {summary['failed']} failed, {summary['skipped']} already there, "
        f"{summary['left']} left "
        f"({summary['wall_s']:.0f} s)"
    )
    return 1 if summary["failed"] else 0


def cmd_tune(args) -> int:
    import math

    from fedlib.errors import check
    from fedlib.studies import tuning
    from fedlib.studies.registry import study, tunable

    known = tunable()
    for chapter in args.chapters:
        check(chapter in known, "chapter", chapter, f"a chapter with a TUNING reference run: {', '.join(known)}")
    grid = tuning.GRID if args.lrs is None else tuple(args.lrs)
    for lr in grid:
        check(math.isfinite(lr) and 1e-6 <= lr <= 10, "--lrs", lr, "learning rates in [1e-6, 10]")
    for chapter in args.chapters:
        print(f"{chapter}: {tuning.summary(tuning.tune(study(chapter), grid))}")
    return 0


def cmd_timing(args) -> int:
    from fedlib import timing
    from fedlib.errors import check
    from fedlib.studies.registry import chapters

    timed = [name for name, c in chapters().items() if c.declared.timing_runs is not None]
    check(args.chapter in timed, "chapter", args.chapter, f"a chapter with efficiency claims: {', '.join(timed)}")
    check(args.repeats >= 3, "--repeats", args.repeats, "at least 3 (the claims need three paired repetitions)")
    timing_runs = chapters()[args.chapter].declared.timing_runs
    assert timing_runs is not None   # the chapter was checked against ``timed`` above
    configs = timing_runs(args.device, args.executor)
    answer = timing.record(args.chapter, configs, args.repeats)
    for row in timing.summary(answer):
        print("  ".join(f"{k}: {v}" for k, v in row.items()))
    print(f"written: results/timing/{args.chapter}.json ({answer['device']}, {answer['wall_s']:.0f} s)")
    return 0


def cmd_book(args) -> int:
    return book_builder().build_book(args.manifest, only=args.config, build=not args.no_build, pdf=args.pdf)


def cmd_list_all(args) -> int:
    cmd_list()
    return 0


def book_builder():
    """The book's builder, ``book/build.py`` of the repository checkout this fedlib runs from (the book's
    notebooks and manifest are not part of the installed package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "book" / "build.py"
    if not path.exists():
        raise ConfigError("book", str(path), "a checkout of the fedlib repository (its book/ and notebooks/ "
                                             "folders): the book is built from there")
    spec = importlib.util.spec_from_file_location("fedlib_book_build", path)
    assert spec is not None and spec.loader is not None, path   # a .py file always has a spec and a loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMANDS = {"list": cmd_list_all, "run": cmd_run, "records": cmd_records, "tune": cmd_tune, "timing": cmd_timing,
            "book": cmd_book}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):   # a terminal that cannot show "±" gets "?", not a traceback
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    try:
        from fedlib.experiment.config import check_environment

        check_environment()
        return COMMANDS[args.command](args)
    except (ConfigError, DataNotFoundError, TrainingDiverged, NotebookFailed, StorageFailed, ClientFailed,
            WorkerDied, LockHeld) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume from the last finished round", file=sys.stderr)
        return 130
