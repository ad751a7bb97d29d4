"""The package's imports run one way (uat_hf/__init__.py lists the layers) and its modules stay small.

Every ``import`` of a ``uat_hf`` module, at module level or inside a function, must name a module of the
same layer or of a layer below. Leaves that import nothing of the package (names, Hub ids, file names,
scores) sit below everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "uat_hf"

#: Bottom to top: the subpackages of uat_hf (CONTRIBUTING.md, "Layout").
LAYERS: list[str] = ["utils", "data", "models", "sampling", "strategies", "evaluation", "training", "cli"]
#: Lines a module of one job may have.
MAX_LINES = 400


def layer_of(module: str) -> int:
    """``uat_hf.x.y`` → the index of subpackage ``x`` in :data:`LAYERS`."""
    top = module.split(".")[1]
    if top not in LAYERS:
        raise AssertionError(f"uat_hf.{top} is in no layer of tests/test_layers.py: put it in a subpackage")
    return LAYERS.index(top)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every ``uat_hf`` module ``path`` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "uat_hf")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "uat_hf":
                # ``from . import x`` / ``from .pkg import module``: the names may be modules themselves.
                found.update(f"{target}.{alias.name}" if target.count(".") == 0 else target for alias in node.names)
    return {m for m in found if m != "uat_hf"}


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_run_one_way(path):
    own = layer_of(module_name(path))
    upward = sorted(m for m in imported_modules(path) if layer_of(m) > own)
    assert not upward, f"{module_name(path)} ({LAYERS[own]}) imports {upward} from a layer above it"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_modules_stay_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module_name(path)} has {lines} lines; split it along a seam"


def test_every_module_is_in_a_layer():
    for path in MODULES:
        layer_of(module_name(path))
