"""What a user installs: the built wheel ships the package's data, and the declared requirements are what the
code imports.

The wheel is built from a copy of the package in a temporary directory (no ``build/`` or egg-info left in
the checkout), with the running interpreter's setuptools and no build isolation, so no download is needed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "uat_hf"
BUNDLED = PACKAGE / "bundled"
#: What the build reads besides the package itself.
BUILD_FILES = ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE")
#: Declared but imported nowhere, on purpose.
NOT_IMPORTED = {
    "ipykernel": "the python3 kernel that tests/test_examples.py runs the notebook in",
    "setuptools": "builds the wheel in this file (pip wheel --no-build-isolation)",
    "ruff": "a linter, run as a command (`ruff check .` in .ci/run), never imported",
}
#: Imported by uat_hf only inside the function of an optional feature, and declared by that extra.
OPTIONAL_IMPORTS = {"peft": "peft",  # LoRA adapters for decoder-only models (uat_hf/models/causal_presets.py)
                    "evaluate": "evaluate"}  # a local evaluate metric in corpus_metrics (uat_hf/evaluation/metrics.py)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def package_files(root: Path) -> set[str]:
    """Wheel paths (``uat_hf/...``) of every file under ``root`` except Python caches."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(PACKAGE, src / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    for name in BUILD_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "-w", str(tmp / "dist"), str(src)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"pip wheel failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (path,) = (tmp / "dist").glob("uat_hf-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def requirements(wheel: zipfile.ZipFile, extra: str = "dev") -> tuple[set[str], set[str]]:
    """(install_requires, the ``extra``) as canonical distribution names, from the wheel's METADATA."""
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(wheel.read(name).decode())
    base, extras = set(), set()
    for line in metadata.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        dist = canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))
        if not marker.strip():
            base.add(dist)
        elif re.search(rf"""extra\s*==\s*["']{extra}["']""", marker):
            extras.add(dist)
    return base, extras


def lazily_imported(path: Path, module: str) -> bool:
    """Whether every import of ``module`` in ``path`` sits inside a function (so importing uat_hf never needs it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return not any((node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0] == module
                   for node in top_level)


def imported_modules(*roots: Path) -> dict[str, set[str]]:
    """Top-level third-party module → the files (relative to the repo) that import it."""
    # conftest, scripts, and the tests' own packages (tests/plugins: an outside strategy); the package's own modules
    # are no top-level names (uat_hf/cli/evaluate.py is not the `evaluate` distribution)
    local = {PACKAGE.name} | {name for root in roots if root != PACKAGE for p in root.rglob("*.py")
                              for name in (p.stem, p.parent.name)}
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local and top != "__future__":
                        found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def distributions_of(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module → canonical names of the installed distributions that provide it (empty: not installed)."""
    provided = importlib.metadata.packages_distributions()
    return {module: {canonical(d) for d in provided.get(module, ())} for module in modules}


def test_wheel_ships_bundled_data_and_every_package_file(wheel):
    shipped = set(wheel.namelist())
    bundled = package_files(BUNDLED)
    assert any(name.endswith(".jsonl.gz") for name in bundled), "no bundled corpora in the checkout?"
    missing = sorted(package_files(PACKAGE) - shipped)
    assert not missing, f"the wheel lacks {len(missing)} package file(s): {missing[:10]}"
    assert "uat_hf/bundled/NOTICE.md" in shipped


def test_wheel_declares_the_console_scripts(wheel):
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(name).decode()
    for script in ("uat-train", "uat-evaluate", "uat-plot"):
        assert re.search(rf"^{script}\s*=", text, re.M), f"{script} is not a console script of the wheel"


def test_every_package_import_is_an_install_requirement(wheel):
    base, _ = requirements(wheel)
    modules = imported_modules(PACKAGE)
    for module, extra in OPTIONAL_IMPORTS.items():
        files = modules.pop(module, set())
        assert module in requirements(wheel, extra)[1], f"{module} is imported by {files} but not in extra {extra!r}"
        eager = sorted(f for f in files if not lazily_imported(ROOT / f, module))
        assert not eager, f"{module} is optional (extra {extra!r}) but imported at module level by {eager}"
    undeclared = {
        module: sorted(files)
        for module, dists in distributions_of(modules).items()
        if not dists & base
        for files in [modules[module]]
    }
    assert not undeclared, f"imported by uat_hf but not in install_requires: {undeclared}"


def test_every_test_import_is_a_requirement_or_dev_extra(wheel):
    base, dev = requirements(wheel)
    modules = imported_modules(ROOT / "tests")
    undeclared = {
        module: sorted(modules[module])
        for module, dists in distributions_of(modules).items() if not dists & (base | dev)
    }
    assert not undeclared, f"imported by tests/ but neither in install_requires nor in the dev extra: {undeclared}"


def test_sentencepiece_is_an_install_requirement(wheel):
    # MarianTokenizer (the opus-mt checkpoints the README points to) needs it though uat_hf never imports it.
    base, _ = requirements(wheel)
    assert "sentencepiece" in base


def test_every_requirement_is_imported_somewhere(wheel):
    base, dev = requirements(wheel)
    roots = [ROOT / name for name in ("uat_hf", "tests", "examples", "benchmarks") if (ROOT / name).is_dir()]
    imported = set().union(*distributions_of(imported_modules(*roots)).values())
    unused = sorted((base | dev) - imported - set(NOT_IMPORTED))
    assert not unused, f"declared but imported nowhere in {[r.name for r in roots]}: {unused}"
