"""The package's layering (ARCHITECTURE.md): every import, at module level or inside a function, goes to the
same layer or one below, and no modules import each other in a circle."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "fedlib"

# lowest first; a module may import modules of its own layer or of a layer below
LAYERS = [
    ["errors", "metrics", "losses", "prototypes", "aggregate", "plots", "serial", "store", "threads", "__init__"],
    ["models", "data"],
    ["engine"],
    ["methods", "backbones"],
    ["experiment"],
    ["flower", "results", "recording", "claims", "timing"],
    ["studies"],
    ["cli", "__main__"],
]
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """fedlib modules ``path`` imports (``from fedlib.x import y`` names fedlib.x.y when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("fedlib")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedlib"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return found


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {module_name(f) for f in FILES}
GRAPH = {module_name(f): (imports(f) & MODULES) - {module_name(f)} for f in FILES}


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYER["__init__"] if len(parts) == 1 else LAYER[parts[1]]


def test_every_top_level_module_has_a_layer():
    assert {m.split(".")[1] for m in MODULES if "." in m} <= set(LAYER)


def test_no_import_runs_up_a_layer():
    upward = sorted((m, i) for m, targets in GRAPH.items() for i in targets if layer(i) > layer(m))
    assert upward == []


def test_no_modules_import_each_other_in_a_circle():
    """A package's face (``fedlib.x``: x/__init__.py) imports its modules; one of them importing the face
    back (``from fedlib.methods import make_method`` inside fedlib/methods/) is a circle."""
    state: dict[str, int] = {}
    circles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert circles == []
