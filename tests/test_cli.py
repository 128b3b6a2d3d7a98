import pytest

from fedlib.cli import main
from fedlib.studies.registry import chapters


def test_list_shows_everything(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ["fedgpa", "fedpac", "scaffold", "dirichlet", "skew", "cifar10", "cnn2", "book"]:
        assert word in out
    from fedlib.data.sources import dataset_names
    assert all(f"  {name} " in out for name in dataset_names())   # every dataset run accepts, digit4 included
    assert "object at 0x" not in out and "base_hyper={}" in out and "prototypes='cpm'" in out   # defaults as typed


@pytest.mark.parametrize("argv, words", [
    (["run", "--method", "fedx"], ["method='fedx'", "one of"]),
    (["run", "--partition", "dirichlet", "alpha=0"], ["alpha=0", "positive"]),
    (["run", "--partition", "skew", "s=120", "setting=1"], ["s=120", "[0, 100]"]),
    (["run", "--set", "fraction=0"], ["fraction=0", "(0, 1]"]),
    (["run", "--dataset", "digits", "--clients", "5000"], ["num_clients=5000", "at most"]),
    (["run", "--dataset", "svhn"], ["svhn", "not found", "download"]),
])
def test_bad_input_is_one_line_without_traceback(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1
    for w in words:
        assert w in err


def test_run_prints_a_table(capsys, tmp_path):
    out_json = tmp_path / "r.json"
    code = main(["run", "--method", "fedavg", "fedgpa", "--dataset", "digits", "--partition", "dirichlet", "alpha=1",
                 "--clients", "4", "--budget", "smoke", "--seeds", "0", "1", "--cache", str(tmp_path), "--no-progress",
                 "--out", str(out_json)])
    assert code == 0
    out = capsys.readouterr().out
    assert "fedgpa" in out and "±" in out and "personal local acc" in out
    assert out_json.exists()


@pytest.mark.parametrize("chapter, words", [("nosuch", "one of " + ", ".join(chapters())),
                                            ("common", "one of " + ", ".join(list(chapters())[:2]))])
def test_records_names_what_chapters_it_can_record(capsys, chapter, words):
    from fedlib.cli import main

    assert main(["records", chapter, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and "Traceback" not in err


@pytest.mark.parametrize("scale", ["reference", "paper"])
@pytest.mark.parametrize("chapter", list(chapters()))
def test_records_knows_every_chapters_grid_at_both_recorded_scales(capsys, chapter, scale, tmp_path, monkeypatch):
    """Every chapter's reference- and paper-scale grid is checked config by config before any process starts; a
    deadline that has passed starts nothing and says how much is left."""
    from fedlib import results
    from fedlib.cli import main

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert main(["records", chapter, "--scale", scale, "--device", "cpu", "--executor", "batched",
                 "--deadline", "1e-9"]) == 0
    out = capsys.readouterr().out
    assert f"{chapter} at scale {scale}: " in out
    assert f"{chapter}: 0 recorded, 0 failed, 0 already there" in out and " left " in out


@pytest.mark.parametrize("argv, words", [(["--workers", "0"], "--workers=0"), (["--deadline", "-5"], "--deadline=-5"),
                                         (["--deadline", "nan"], "--deadline=nan"), (["--tables", "nosuch"], "tables"),
                                         (["--device", "tpu"], "device"), (["--scale", "book"], "--scale='book'")])
def test_records_refuses_bad_options_in_one_line(capsys, argv, words):
    from fedlib.cli import main

    assert main(["records", "fedgpa", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and words in err and "Traceback" not in err


def test_scale_is_a_chapters_word_the_command_line_takes_a_budget(capsys):
    """`--scale book` once meant a generic budget unlike any chapter's book scale: it is refused with a pointer
    to --budget, whose names cannot be mistaken for a chapter's scale."""
    from fedlib.cli import main

    assert main(["run", "--dataset", "digits", "--scale", "book", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use --budget smoke | short | full" in err
    assert main(["run", "--dataset", "digits", "--budget", "book", "--no-progress"]) == 2
    assert "--budget='book' is not allowed: one of smoke, short, full" in capsys.readouterr().err


def _shell_commands(markdown: str) -> list[list[str]]:
    """The commands of a page's ```bash blocks, continuation lines joined, comments dropped."""
    import re
    import shlex

    commands = []
    for block in re.findall(r"```bash\n(.*?)```", markdown, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_every_command_of_the_quick_start_and_readme_is_accepted_as_written():
    """Each `python -m fedlib ...` line parses with the real parser (its subcommand, options and values);
    each papermill line names an existing notebook and only parameters that notebook declares."""
    import json
    from pathlib import Path

    import yaml

    from fedlib.cli import _parser

    root = Path(__file__).resolve().parents[1]
    checked = 0
    for page in ("book/quickstart.md", "README.md", "book/flower.md", "book/usage.md"):
        for words in _shell_commands((root / page).read_text()):
            if words[:3] == [".venv/bin/python", "-m", "fedlib"]:
                _parser().parse_args(words[3:])   # SystemExit (a failing test) on an unknown option or value
                checked += 1
            elif words[0].endswith("papermill"):
                notebook = json.loads((root / words[1]).read_text())
                declared = "".join("".join(c["source"]) for c in notebook["cells"]
                                   if "parameters" in c["metadata"].get("tags", []))
                names = [words[i + 1] for i, w in enumerate(words) if w == "-p"]
                names += [k for i, w in enumerate(words) if w == "-y" for k in yaml.safe_load(words[i + 1])]
                assert all(f"{name} =" in declared for name in names), (page, words)
                checked += 1
    assert checked >= 8
