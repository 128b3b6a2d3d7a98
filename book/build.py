"""The book's builder (``python -m fedlib book``, or ``python book/build.py``): execute each notebook
configuration of the manifest with papermill, then build the Jupyter Book. Finished notebooks are skipped while
their source, parameters and fedlib's code are unchanged; experiment results come from the result cache, so a
rebuild takes a minute or two and an interrupted build resumes where it stopped.

It lives beside the book, not in the library: it needs the repository's notebooks and manifest, which an
installed fedlib does not have."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml
from nbclient.exceptions import DeadKernelError
from tqdm import tqdm

from fedlib.errors import ConfigError, NotebookFailed, StorageFailed
from fedlib.store import atomic_write
from fedlib.studies.registry import chapters, notebook_parameters

ROOT = Path(__file__).resolve().parents[1]


def _stamp(source: Path, params: dict) -> str:
    """Changes when the notebook, its parameters, fedlib's code or the committed records a page reads change (and
    with the environment that selects those records, ``FEDLIB_RESULTS``); runs themselves are cached separately,
    keyed by config, so re-executing after a change is cheap."""
    from fedlib import results

    h = hashlib.sha256(source.read_bytes())
    h.update(json.dumps(params, sort_keys=True).encode())
    h.update(str(results.RESULTS.resolve()).encode())
    for path in [*sorted((ROOT / "fedlib").rglob("*.py")), *sorted((ROOT / "notebooks").glob("*/*.py"))]:
        h.update(path.read_bytes())   # the library and the chapters' study modules
    for path in sorted(Path(results.RESULTS).rglob("*.json")):
        h.update(str(path.relative_to(results.RESULTS)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


MANIFEST_BYTES = 1_000_000   # a manifest lists notebooks and parameters: a few kB


class NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: nested aliases expand a small file into billions of values."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"an alias (*{event.anchor}) at line "
                                                          f"{event.start_mark.line + 1}", event.start_mark)
        return super().compose_node(parent, index)


def read_manifest(manifest_path: str) -> dict:
    """The manifest, checked: a YAML mapping with ``build`` (configuration names), ``chapters`` (each a
    ``notebook`` path and ``configurations``: name -> {output, parameters}) and optionally ``registered: true``
    (every registered chapter's notebook first, ``with_registered``); anything else is one ConfigError naming the
    file and what is wrong."""
    path = ROOT / manifest_path
    shape = ("a YAML file: build: [names]; chapters: [{notebook: path, configurations: {name: {output: path, "
             "parameters: {...}}}}]")
    if not path.is_file():
        raise ConfigError("manifest", manifest_path, f"{shape} ({'a folder' if path.is_dir() else 'no such file'})")
    try:
        text = path.read_text()
        if len(text) > MANIFEST_BYTES:
            raise ConfigError("manifest", manifest_path, f"a manifest of at most {MANIFEST_BYTES:,} bytes (it holds "
                                                         f"{len(text):,})")
        manifest = yaml.load(text, Loader=NoAliasLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("manifest", manifest_path, f"a readable file ({exc})") from None
    except yaml.composer.ComposerError as exc:
        raise ConfigError("manifest", manifest_path, f"YAML without anchors and aliases ({exc.problem})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1}: {getattr(exc, 'problem', '')})" if where else ""
        raise ConfigError("manifest", manifest_path, f"valid YAML{line}") from None

    def need(ok, field, value, allowed):
        if not ok:
            raise ConfigError(f"{manifest_path}: {field}", value, allowed)

    need(isinstance(manifest, dict), "the whole file", type(manifest).__name__, shape)
    need(isinstance(manifest.get("registered", False), bool), "registered", manifest.get("registered"),
         "true or false: whether every registered chapter's notebook comes first, at ci, book and paper scale")
    if manifest.get("registered") and isinstance(manifest.get("chapters", []), list):
        manifest["chapters"] = with_registered(manifest.get("chapters") or [])
    need(isinstance(manifest.get("build"), list) and all(isinstance(n, str) for n in manifest["build"]), "build",
         manifest.get("build"), "a list of configuration names")
    need(isinstance(manifest.get("chapters"), list) and manifest["chapters"], "chapters", manifest.get("chapters"),
         "a non-empty list of {notebook, configurations}")
    def inside(path) -> bool:   # a relative path that stays in the repository (no "..", no absolute path)
        return isinstance(path, str) and not Path(path).is_absolute() and \
            (ROOT / path).resolve().is_relative_to(ROOT.resolve())

    sources = {(ROOT / c["notebook"]).resolve() for c in manifest["chapters"]
               if isinstance(c, dict) and isinstance(c.get("notebook"), str)}
    for i, chapter in enumerate(manifest["chapters"]):
        need(isinstance(chapter, dict) and isinstance(chapter.get("notebook"), str), f"chapters[{i}].notebook",
             chapter.get("notebook") if isinstance(chapter, dict) else chapter, "a notebook path")
        need(inside(chapter["notebook"]), f"chapters[{i}].notebook", chapter["notebook"],
             "a notebook path inside the repository (relative, no '..')")
        confs = chapter.get("configurations")
        need(isinstance(confs, dict) and confs, f"chapters[{i}].configurations", confs,
             "a mapping {name: {output, parameters}}")
        for name, conf in confs.items():
            field = f"{chapter['notebook']} [{name}]"
            need(isinstance(conf, dict), field, conf, "a mapping {output: path, parameters: {...}}")
            need(isinstance(conf.get("output"), str) and conf["output"].endswith(".ipynb"), f"{field} output",
                 conf.get("output"), "a notebook path ending in .ipynb")
            need(inside(conf["output"]), f"{field} output", conf["output"],
                 "a path inside the repository (relative, no '..'): the builder writes there")
            own = (ROOT / conf["output"]).resolve() == (ROOT / chapter["notebook"]).resolve()
            need(own or (ROOT / conf["output"]).resolve() not in sources, f"{field} output", conf["output"],
                 "not another chapter's notebook (the builder would overwrite it)")
            need(isinstance(conf.get("parameters", {}), dict), f"{field} parameters", conf.get("parameters"),
                 "a mapping {parameter: value}")
    return manifest


def chapter_notebooks() -> dict[str, str]:
    """{chapter: its notebook, relative to the repository} of every registered chapter whose notebook (beside its
    study module) is in the repository, in the registry's order."""
    found = {name: c.notebook for name, c in chapters().items()}
    return {name: str(path.relative_to(ROOT)) for name, path in found.items()
            if path.is_relative_to(ROOT) and path.exists()}


def chapter_configurations(name: str, notebook: str) -> dict:
    """What the book executes of a registered chapter's notebook: the committed ci-scale notebook nbval checks (the
    notebook itself), the book's page, and the paper-scale reproduction."""
    return {"ci": {"output": notebook, "parameters": {"scale": "ci"}},
            "book": {"output": f"book/chapters/{name}.ipynb", "parameters": {"scale": "book"}},
            "paper": {"output": f"reproduced/{name}_paper.ipynb",
                      "parameters": {"scale": "paper", "device": "auto", "executor": "auto"}}}


def with_registered(listed: list) -> list:
    """The manifest's notebooks with every registered chapter that has a notebook first, in the registry's order,
    each with ``chapter_configurations``; where the manifest lists that notebook too, its configurations replace
    those of the same name (FedGPA's book page trains two settings of three)."""
    own = {c.get("notebook"): c for c in listed if isinstance(c, dict)}
    registered = [{"notebook": notebook, "configurations": {
        **chapter_configurations(name, notebook), **((own.get(notebook) or {}).get("configurations") or {})}}
        for name, notebook in chapter_notebooks().items()]
    taken = {c["notebook"] for c in registered}
    return registered + [c for c in listed if not isinstance(c, dict) or c.get("notebook") not in taken]


def synced_toc(book_dir: Path, manifest: dict) -> str:
    """The table of contents with its pages under ``chapters/`` being the manifest's book pages in its order (the
    registered chapters', then the Results overview): what ``build_book`` writes before the HTML build, so that a
    registered chapter is listed without an edit; the other pages stay where they are."""
    outputs = [ROOT / c["configurations"]["book"]["output"] for c in manifest["chapters"]
               if "book" in c["configurations"]]
    pages = [f"chapters/{out.stem}" for out in outputs if out.parent.resolve() == (book_dir / "chapters").resolve()]
    lines = (book_dir / "_toc.yml").read_text().splitlines(keepends=True)
    entries = [i for i, line in enumerate(lines) if line.strip().startswith("- file: ")]
    listed = [i for i in entries if lines[i].strip().startswith("- file: chapters/")]
    if not entries:
        return "".join(lines)
    first = lines[(listed or entries)[0]]
    indent = first[:len(first) - len(first.lstrip())]
    kept = [line for i, line in enumerate(lines) if i not in listed]
    at = listed[0] if listed else entries[-1] + 1   # where the chapters stood, or after the last page
    return "".join(kept[:at] + [f"{indent}- file: {page}\n" for page in pages] + kept[at:])


def jobs(manifest: dict, only: str | None):
    for chapter in manifest["chapters"]:
        for name, conf in chapter["configurations"].items():
            if (only is None and name in manifest["build"]) or name == only:
                yield chapter["notebook"], name, conf


def check_parameters(notebook: str, name: str, conf: dict) -> None:
    """Refuse a configuration that sets a parameter its notebook does not declare (papermill would inject
    it silently and the notebook would run with its default)."""
    import ast
    import numbers

    import papermill

    declared = papermill.inspect_notebook(str(ROOT / notebook))
    for key, value in (conf.get("parameters") or {}).items():
        if key not in declared:
            raise ConfigError(f"{notebook} [{name}] parameter {key}", value,
                              f"a parameter of {Path(notebook).name}: {', '.join(declared) or 'none'}")
        try:
            default = ast.literal_eval(declared[key]["default"])
        except (ValueError, SyntaxError):
            continue
        numeric = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (value, default))
        if default is not None and value is not None and type(value) is not type(default) and not numeric:
            raise ConfigError(f"{notebook} [{name}] parameter {key}", value,
                              f"a {type(default).__name__} like its default {declared[key]['default']}")
    allowed = notebook_parameters(Path(notebook).stem)
    for key, value in (conf.get("parameters") or {}).items():
        if key not in allowed or value is None:
            continue
        listed = declared[key]["default"].strip() == "None" or declared[key]["default"].strip().startswith("[")
        values = value if isinstance(value, list) else [value]
        if (listed and not isinstance(value, list)) or not all(v in allowed[key] for v in values):
            raise ConfigError(f"{notebook} [{name}] parameter {key}", value,
                              ("a list of " if listed else "one of ") + ", ".join(map(str, allowed[key])))


def tables_at_chance(executed: Path) -> list[str]:
    """The results tables of an executed notebook that mark cells below twice chance without a reason
    (``ResultsTable`` writes ``data-unexplained-chance`` at book scale): "cell k: n cells" each."""
    import json
    import re

    found = []
    for k, cell in enumerate(json.loads(executed.read_text())["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/html", ""))
            found += [f"code cell {k}: {n} cells" for n in re.findall(r"data-unexplained-chance='(\d+)'", text)]
    return found


def merge_parameters(executed: Path) -> bool:
    """One Parameters cell in the book: the values papermill injected replace the defaults in the notebook's own
    parameters cell (its comments kept, "set by this build" added), and the injected cell is dropped. A cell whose
    assignments are not one line each is left as papermill wrote it. Returns whether the notebook changed."""
    import ast

    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    tagged = {tag: i for i, c in enumerate(nb.cells) for tag in c.metadata.get("tags", [])}
    if "parameters" not in tagged or "injected-parameters" not in tagged:
        return False
    own, injected = nb.cells[tagged["parameters"]], nb.cells[tagged["injected-parameters"]]
    try:
        values = {node.targets[0].id: ast.get_source_segment(injected.source, node.value)
                  for node in ast.parse(injected.source).body
                  if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
        assigned = [node for node in ast.parse(own.source).body if isinstance(node, ast.Assign)]
    except SyntaxError:
        return False
    if any(node.lineno != node.end_lineno for node in assigned):
        return False
    lines = own.source.split("\n")
    names = {node.targets[0].id: node for node in assigned
             if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    if not set(values) <= set(names):
        return False
    for name, value in values.items():
        node = names[name]
        line = lines[node.lineno - 1]
        default = line[node.value.col_offset:node.value.end_col_offset]
        if default == value:
            continue
        comment = line[node.value.end_col_offset:]
        note = f"  # set by this build (the notebook's default: {default})"
        lines[node.lineno - 1] = line[:node.value.col_offset] + value + (
            comment.rstrip() + f"; set by this build (default {default})" if comment.strip() else note)
    own.source = "\n".join(lines)
    del nb.cells[tagged["injected-parameters"]]
    nbformat.write(nb, str(executed))
    return True


STATUS_MARK = "Where this chapter stands"   # registry.Chapter.status_html's box, shown by the notebook's set-up cell


def _after_title(markdown: str) -> str:
    """What follows a page's heading in its first markdown cell: the text after the title line and, where the next
    paragraph cites the paper (a DOI, arXiv or official-code link), after that paragraph too ("" if nothing)."""
    paragraphs = markdown.split("\n\n")
    head = 2 if len(paragraphs) > 1 and re.search(r"doi|arxiv|official code", paragraphs[1], re.I) else 1
    return "\n\n".join(paragraphs[head:])


def status_first(executed: Path) -> bool:
    """The status box is the first thing under the page's title: its output moves from the set-up cell into a cell
    of its own right after the title and the paper's citation line (input hidden; the rest of the first markdown
    cell follows it in a cell of its own), so a reader sees what the page can and cannot say before the
    introduction, the parameters and the set-up. Returns whether the notebook changed."""
    import nbformat

    nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:
        if "status-box" in cell.metadata.get("tags", []):
            return False   # moved already
        for i, out in enumerate(cell.get("outputs", [])):
            if STATUS_MARK in str(out.get("data", {}).get("text/html", "")):
                box = cell.outputs.pop(i)
                title = next((k for k, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
                if title >= 0 and (rest := _after_title(nb.cells[title].source)):
                    nb.cells[title].source = nb.cells[title].source[:-len(rest)].rstrip()
                    nb.cells.insert(title + 1, nbformat.v4.new_markdown_cell(rest))
                status = nbformat.v4.new_code_cell(   # a cell with no source is not rendered: it says what it holds
                    "# the status box of the set-up cell below, moved here by the book's builder",
                    metadata={"tags": ["remove-input", "status-box"]}, outputs=[box])
                nb.cells.insert(title + 1, status)
                nbformat.write(nb, str(executed))
                return True
    return False


def execute(notebook: str, name: str, conf: dict) -> tuple[bool, float]:
    """Run one notebook configuration with papermill unless its stamp says it is up to date."""
    import papermill

    src, out = ROOT / notebook, ROOT / conf["output"]
    params = conf.get("parameters", {})
    stamp_file = out.with_suffix(".stamp")
    stamp = _stamp(src, params)
    if out.exists() and stamp_file.exists() and stamp_file.read_text() == stamp and src != out:
        return False, 0.0
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageFailed(f"{notebook} [{name}]: {os.path.relpath(out.parent, ROOT)} could not be made "
                            f"({exc.strerror}); nothing was run") from None
    started = time.time()
    env_before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # no progress bars inside rendered notebooks
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_out = Path(tmp) / out.name
            try:
                papermill.execute_notebook(str(src), str(tmp_out), parameters=params, kernel_name="python3",
                                           progress_bar=False, cwd=str(src.parent))
            except papermill.PapermillExecutionError as exc:
                failed = out.with_name(out.stem + ".failed.ipynb")
                shutil.move(str(tmp_out), failed)
                raise NotebookFailed(f"{notebook} [{name}] failed in cell {exc.exec_count}: {exc.ename}: "
                                     f"{exc.evalue}; the executed part is in {os.path.relpath(failed, ROOT)}") from None
            except DeadKernelError:
                raise NotebookFailed(f"{notebook} [{name}]: its kernel died (killed, or out of memory); the previous "
                                     "page is kept: run the same command again") from None
            unexplained = tables_at_chance(tmp_out)
            if unexplained:
                failed = out.with_name(out.stem + ".failed.ipynb")
                shutil.move(str(tmp_out), failed)
                raise NotebookFailed(
                    f"{notebook} [{name}]: {len(unexplained)} results tables show models below twice chance and do "
                    f"not say why ({'; '.join(unexplained)}): train them longer at this scale, or pass "
                    f"show_table(..., at_chance='why') where that is the finding; see {os.path.relpath(failed, ROOT)}")
            if src != out:   # a page of the book (the committed ci notebooks keep papermill's cells: they are sources)
                merge_parameters(tmp_out)
                status_first(tmp_out)
            try:   # only a finished notebook replaces the old one, and only once it is written whole
                atomic_write(out, lambda tmp: shutil.copyfile(tmp_out, tmp))
            except OSError as exc:
                raise StorageFailed(f"{notebook} [{name}]: {os.path.relpath(out, ROOT)} could not be written "
                                    f"({exc.strerror}); the previous page is kept") from None
    finally:
        if env_before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = env_before
    if src != out:
        stamp_file.write_text(stamp)
    return True, time.time() - started


def ensure_mathjax(book_dir: Path) -> None:
    """Ship MathJax 3 with the book (the default loads it from a CDN): npm pack mathjax@3, keep es5/."""
    target = book_dir / "_mathjax" / "mathjax"
    if (target / "tex-chtml.js").exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", "--silent", "mathjax@3"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        tarball = next(Path(tmp).glob("mathjax-*.tgz"))
        with tarfile.open(tarball) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith("package/es5/")]
            tar.extractall(tmp, members=members, filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(Path(tmp) / "package" / "es5", target, dirs_exist_ok=True)


# what must fit the text column: verdict boxes, tables of sentences, provenance lines, printed notes, every table,
# every display equation; every figure a notebook draws has a caption (a number); no number breaks inside its cell
LAYOUT_SELECTORS = ("div.verdict, table.text-table, p.provenance, div.cell_output div.output.stream pre, "
                    "div.results-table")
LAYOUT_JS = ("<script>window.addEventListener('load', () => setTimeout(() => {"
             " const column = (document.querySelector('article.bd-article') || document.querySelector('main')"
             " || document.body).clientWidth;"
             " const text = el => (el.textContent || el.getAttribute('alt') || '').trim().slice(0, 60);"
             f" const out = [...document.querySelectorAll('{LAYOUT_SELECTORS}')]"
             ".filter(el => el.scrollWidth > el.clientWidth + 2)"
             ".map(el => [el.className || el.tagName, el.scrollWidth, el.clientWidth, text(el)]);"
             " document.querySelectorAll('table').forEach(t => { const w = t.getBoundingClientRect().width;"
             " if (w > column + 2) out.push(['table ' + t.className, Math.round(w), column, text(t)]); });"
             " document.querySelectorAll('mjx-container[display=\"true\"]').forEach(e => {"
             " if (e.scrollWidth > e.clientWidth + 2)"
             " out.push(['equation', e.scrollWidth, e.clientWidth, text(e)]); });"
             " document.querySelectorAll('.cell_output img, .output img').forEach(i => {"
             " if (!i.closest('figure')) out.push(['figure without a caption', 0, 0, i.getAttribute('src') || '']); });"
             " document.querySelectorAll('td.num').forEach(td => { const r = document.createRange();"
             " r.selectNodeContents(td); const tops = new Set([...r.getClientRects()].filter(x => x.width > 0)"
             ".map(x => Math.round(x.top))); if (tops.size > 1) out.push(['number broken inside its cell', 0, 0,"
             " text(td)]); });"
             " const pre = document.createElement('pre'); pre.id = 'layout-report';"
             " pre.textContent = JSON.stringify(out); document.body.appendChild(pre); }, 500));</script>")


def find_browser() -> str | None:
    """The headless browser the layout check uses, or None where none is installed."""
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def layout_problems(html_dir: Path, browser: str, width: int = 1280) -> dict[str, list]:
    """Every page of the built book opened in headless ``browser`` (Chromium) at ``width`` px: per page, what needs
    horizontal scrolling (verdict boxes, tables, results tables' boxes, provenance lines, printed notes, display
    equations wider than the text column), every figure a notebook drew without a caption, and every number broken
    inside its table cell. Source listings are left to scroll."""
    import html as html_lib
    import re

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "html"
        shutil.copytree(html_dir, copy)
        for page in sorted(copy.rglob("*.html")):
            if page.parent.name == "_static" or page.name in ("genindex.html", "search.html"):
                continue
            page.write_text(page.read_text().replace("</body>", LAYOUT_JS + "</body>"))
            dom = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                                  f"--window-size={width},900", "--virtual-time-budget=8000", "--dump-dom",
                                  page.as_uri()], capture_output=True, text=True, timeout=120).stdout
            found = re.search(r'<pre id="layout-report">(.*?)</pre>', dom, re.S)
            if found and (problems := json.loads(html_lib.unescape(found.group(1)))):
                out[str(page.relative_to(copy))] = problems
    return out


def build_pdf(book_dir: Path, jupyter_book: list[str], browser: str) -> Path:
    """The whole book as one PDF: Sphinx's single-page HTML of the executed pages (MathJax included), printed by
    headless Chromium. Offline, unlike Jupyter Book's own ``pdfhtml`` builder (playwright downloads its browser) and
    ``pdflatex`` builder (a TeX installation)."""
    subprocess.run([*jupyter_book, "build", str(book_dir), "--builder", "custom", "--custom-builder", "singlehtml"],
                   check=True)
    root = yaml.safe_load((book_dir / "_toc.yml").read_text())["root"]
    page = book_dir / "_build" / "singlehtml" / f"{root}.html"
    pdf = book_dir / "_build" / "pdf" / "book.pdf"
    pdf.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.resolve().as_uri()], check=True,
                   capture_output=True, timeout=900)
    return pdf


def build_book(manifest_path: str = "book/experiments.yml", only: str | None = None, build: bool = True,
               pdf: bool = False) -> int:
    path = ROOT / manifest_path
    manifest = read_manifest(manifest_path)
    todo = list(jobs(manifest, only))
    if not todo:
        names = sorted({n for c in manifest["chapters"] for n in c["configurations"]})
        raise ConfigError("config", only, f"one of {', '.join(names)}")
    for notebook, name, conf in todo:   # every configuration is checked before the first one runs
        if not (ROOT / notebook).exists():
            raise ConfigError(f"{manifest_path}: notebook", notebook, "a notebook path relative to the repository")
        check_parameters(notebook, name, conf)
    bar = tqdm(todo, desc="notebooks", unit="nb")
    for notebook, name, conf in bar:
        bar.set_postfix_str(f"{Path(notebook).stem} [{name}]")
        ran, seconds = execute(notebook, name, conf)
        tqdm.write(
            f"{notebook} [{name}] -> {conf['output']}: " + (f"executed in {seconds:.0f} s" if ran else "up to date")
        )
    if not build:
        return 0
    book_dir = path.parent
    toc = synced_toc(book_dir, manifest)
    if toc != (book_dir / "_toc.yml").read_text():
        (book_dir / "_toc.yml").write_text(toc)
        print(f"{book_dir / '_toc.yml'}: its chapters' pages listed again from the manifest (commit it)")
    ensure_mathjax(book_dir)
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    jupyter_book = [jb] if jb else [sys.executable, "-m", "jupyter_book"]
    result = subprocess.run([*jupyter_book, "build", str(book_dir), "-W", "-n", "--keep-going"])
    if result.returncode != 0:
        return result.returncode
    browser = find_browser()
    if browser is None:
        print("layout check skipped: no Chromium on this machine (apt-get install chromium)")
    elif problems := layout_problems(book_dir / "_build" / "html", browser):
        for page, found in problems.items():
            print(f"{page}: {len(found)} layout problem(s) at 1280 px, e.g. {found[0]}")
        return 1
    else:
        print("layout check: every verdict box, table, note and equation fits the text column at 1280 px, every "
              "figure has a caption and no number breaks inside its cell")
    print(f"book: {book_dir / '_build' / 'html' / 'index.html'}")
    if pdf:
        if browser is None:
            print("no PDF: it is printed by Chromium, which this machine lacks (apt-get install chromium)")
            return 1
        print(f"pdf: {build_pdf(book_dir, jupyter_book, browser)}")
    return 0


if __name__ == "__main__":
    from fedlib.cli import main

    sys.exit(main(["book", *sys.argv[1:]]))
