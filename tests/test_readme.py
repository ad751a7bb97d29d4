"""The README's Python example runs as printed (it is kept verbatim in examples/readme_example.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_is_the_tested_file():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    example = (ROOT / "examples" / "readme_example.py").read_text()
    assert block.strip() in example


def test_readme_commands_match_ci():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"## Set up.*?```bash\n(.*?)\n```", readme, re.S).group(1).strip()
    tests = re.search(r"## Run the tests.*?```bash\n(.*?)\n```", readme, re.S).group(1).strip()
    assert setup in ci.splitlines() and tests in ci.splitlines()


def test_readme_example_runs(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "readme_example.py")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "eval_mean_bleu" in result.stdout and "p = {'bible'" in result.stdout
