"""The book layer: the machinery every chapter shares (registry, grids and records, verdict boxes, tables, convergence,
the overview; the claims and their decision are ``fedlib.claims``, the side-by-side timing ``fedlib.timing``). The
chapters themselves live outside the package, one folder per paper beside its notebook
(``notebooks/<paper>/<paper>.py`` of the repository checkout): their folders are part of this package's search path,
so a chapter's study module is ``fedlib.studies.<paper>`` wherever it is imported (the command line, the tests, a
notebook's kernel and the processes a grid starts), and an installed fedlib without the checkout has the machinery
and no chapters."""
from pathlib import Path

CHAPTER_FOLDERS = Path(__file__).resolve().parents[2] / "notebooks"   # the checkout's notebooks/<paper>/ folders


def chapter_folders() -> list[Path]:
    """The folders of the checkout's notebooks/ that hold a study module named like the folder."""
    if not CHAPTER_FOLDERS.is_dir():
        return []
    return sorted(f for f in CHAPTER_FOLDERS.iterdir() if (f / f"{f.name}.py").is_file())


__path__.extend(str(f) for f in chapter_folders())
