"""A sixth paper added from outside the package: its study module (tests/chapters/sixth.py) beside a notebook
written from the template, executed at ci scale as the book's builder executes a chapter."""
import json
import shutil
from pathlib import Path

import pytest

from fedlib.studies import registry, template

SIXTH = Path(__file__).parent / "chapters" / "sixth.py"


def test_the_template_holds_the_shared_skeleton_one_call_each():
    nb = template.notebook("mypaper", "My paper")
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].source.startswith("# My paper") and "{cite:p}`mypaper`" in nb.cells[0].source
    assert [c.metadata.get("tags") for c in nb.cells if c.cell_type == "code"][0] == ["parameters"]
    for call in ('open_chapter("mypaper", scale, device, executor)', "study.protocol(scale)",
                 "study.hyperparameters(scale)", "study.headline_runs(scale)", "study.show_paper_scale()",
                 "study.close({study.headline_name(scale): runs}, scale"):
        assert sum(call in c for c in code) == 1, call
    assert "import mypaper" not in "".join(code)     # a chapter inside fedlib is imported by the registry
    assert "import mypaper  #" in template.notebook("mypaper", "My paper", outside=True).cells[2].source


def test_the_template_never_overwrites(tmp_path):
    from fedlib.errors import ConfigError

    path = template.write("mypaper", "My paper", tmp_path / "mypaper.ipynb")
    with pytest.raises(ConfigError, match="a path where no file is yet"):
        template.write("mypaper", "My paper", path)


def test_a_sixth_chapter_from_outside_the_package_runs_its_template_notebook_at_ci_scale(tmp_path, monkeypatch):
    """Two files of its own (study module, notebook), nothing edited inside fedlib: the notebook executes, shows
    the status box, the protocol, the headline table against the paper and the verdict box, and leaves its summary
    for the Results overview."""
    import papermill

    folder = tmp_path / "publications"
    folder.mkdir()
    shutil.copy(SIXTH, folder / "sixth.py")
    template.write("sixth", "Sixth paper", folder / "sixth.ipynb", outside=True)
    monkeypatch.setenv("FEDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDLIB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    papermill.execute_notebook(str(folder / "sixth.ipynb"), str(tmp_path / "out.ipynb"), parameters={"scale": "ci"},
                               kernel_name="python3", progress_bar=False, cwd=str(folder))
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    shown = json.dumps([c.get("outputs", []) for c in cells])
    assert "Where this chapter stands" in shown and "scale ci: digits, 4 clients, 2 rounds" in shown
    assert "FedAvg-FT" in shown and "90.0" in shown                  # the headline table beside the paper
    assert "fine-tuning beats FedAvg on local tests" in shown          # the verdict box
    assert "committed paper-scale records (the headline table): 0 current" in shown
    summary = json.loads((tmp_path / "cache" / "summaries" / "sixth-ci.json").read_text())
    assert summary["claims"][0]["claim"] == "fine-tuning beats FedAvg on local tests" and summary["headline"]
    assert "sixth" not in registry.CHAPTERS                            # registered in its kernel only
