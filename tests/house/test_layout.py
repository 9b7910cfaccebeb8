"""The package's imports run one way, as README.md's layout section says: each room imports only
rooms below it, nothing in the library imports the application (``experiments``, ``benchmarks``,
``examples``), and the top level holds about twelve public entries."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dgsgld"

# Floors from the bottom; a room may import rooms on lower floors and modules of its own room.
FLOORS = [
    {"_util", "_version"},
    {"networks", "model"},
    {"communication", "gradients"},
    {"samplers"},
    {"evaluate"},
    {"runner"},
    {"theory", "parallel", "posteriors"},
    {"tuning", "_cli"},
    {"__init__", "__main__"},
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def room_of(module: str) -> str:
    """``dgsgld.samplers.base`` -> ``samplers``; ``dgsgld`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_of(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(path: pathlib.Path) -> set[str]:
    """The absolute module names ``path`` imports (relative imports resolved), outside
    ``if TYPE_CHECKING:`` blocks included: a type-only import still ties the rooms."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module:
                    names.add(target)
                else:  # from .. import x: x is a module, or a name of the package itself
                    names |= {f"{target}.{a.name}" if is_module(f"{target}.{a.name}") else target
                              for a in node.names}
            else:
                names.add(node.module)
    return names


def test_every_room_is_on_a_floor():
    rooms = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert rooms == set(FLOOR), rooms ^ set(FLOOR)


def test_imports_run_downwards_only():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        source = room_of(module_of(path))
        for name in imported(path):
            if name.split(".")[0] != "dgsgld":
                continue
            target = room_of(name)
            if target != source and FLOOR[target] >= FLOOR[source]:
                upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not upward, upward


def test_the_library_never_imports_the_application():
    offenders = [f"{p.relative_to(ROOT)} imports {n}" for p in PACKAGE.rglob("*.py")
                 for n in imported(p) if n.split(".")[0] in ("experiments", "benchmarks",
                                                             "examples")]
    assert not offenders, offenders


def test_the_readme_states_this_order():
    text = " ".join((ROOT / "README.md").read_text().split())
    line = re.search(r"Imports run one way.*?`_util`", text).group(0)
    order = [set(re.findall(r"`(\w+)`", part)) for part in line.split("→")]
    public = [rooms - {"_cli", "__init__", "__main__", "_version"} for rooms in reversed(FLOORS)]
    assert order == [rooms for rooms in public if rooms], (order, public)


def test_about_twelve_public_top_level_entries():
    public = [p.name for p in PACKAGE.iterdir()
              if not p.name.startswith("_") and (p.suffix == ".py" or p.is_dir())]
    assert len(public) <= 12, sorted(public)
