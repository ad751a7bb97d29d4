"""The README says what runs and what it prints: its Python example is examples/readme_example.py verbatim and
prints the table the README shows; its set-up and test commands are the ones CI runs; its corpus examples
(recipe YAML and CorpusSpec code) describe the same corpora and read the formats they name."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "readme_example.py"
TABLE_HEADER = ["corpus", "pairs", "p", "start", "p", "end", "BLEU", "chrF"]


def readme() -> str:
    return README.read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme(), re.S)


def one_block(language: str, marker: str) -> str:
    found = [block for block in blocks(language) if marker in block]
    assert len(found) == 1, f"expected one ```{language} block containing {marker!r}, found {len(found)}"
    return found[0]


def example_output_in_readme() -> list[str]:
    """The ```text block right after the README's Python example."""
    text = readme()
    start = text.index(one_block("python", "trainer.train()"))
    output = re.search(r"```text\n(.*?)```", text[start:], re.S)
    assert output is not None, "the README shows no output after its Python example"
    return output.group(1).strip().splitlines()


def parse_table(lines: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Rows by corpus name (pairs, p start, p end, BLEU, chrF, as printed) and the mean row's BLEU and chrF."""
    assert lines[0].split() == TABLE_HEADER, lines[0]
    rows = {}
    for line in lines[1:-1]:
        name, *values = line.split()
        assert len(values) == 5, line
        rows[name] = values
    mean = lines[-1].split()
    assert mean[0] == "mean" and len(mean) == 3, lines[-1]
    return rows, mean[1:]


def test_readme_python_example_is_the_tested_file():
    assert one_block("python", "trainer.train()").strip() in EXAMPLE.read_text(encoding="utf-8")


def test_readme_commands_match_ci():
    ci = (ROOT / ".ci" / "run").read_text()
    setup = re.search(r"## Set up.*?```bash\n(.*?)\n```", readme(), re.S).group(1).strip()
    tests = re.search(r"## Run the tests.*?```bash\n(.*?)\n```", readme(), re.S).group(1).strip()
    assert setup in ci.splitlines() and tests in ci.splitlines()


def test_readme_example_prints_the_table_the_readme_shows(tmp_path):
    result = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    printed = lines[next(i for i, line in enumerate(lines) if line.split()[:1] == ["corpus"]):]
    rows, mean = parse_table(printed)
    shown_rows, shown_mean = parse_table(example_output_in_readme())
    # The same corpora, the same training sizes after cleaning and the same prior (data and tokenizer are
    # deterministic); p end, BLEU and chrF depend on floating-point sums, so another CPU may print others.
    assert list(rows) == list(shown_rows) == ["bible", "descriptions", "dictionary", "software"]
    assert {name: values[:2] for name, values in rows.items()} == {
        name: values[:2] for name, values in shown_rows.items()
    }
    for table, means in ((rows, mean), (shown_rows, shown_mean)):
        numbers = {name: [float(v) for v in values] for name, values in table.items()}
        for column in (1, 2):  # p start, p end: distributions over the corpora
            assert sum(values[column] for values in numbers.values()) == pytest.approx(1, abs=0.003)
        for values in numbers.values():
            assert all(0 <= score <= 100 for score in values[3:])
        assert all(0 <= float(score) <= 100 for score in means)


def test_readme_corpus_examples_read_the_formats_they_name(tmp_path, monkeypatch):
    """The recipe entries and the CorpusSpec code describe the same corpora, and every local file they name
    loads in the layout its comment describes (the Hub entry needs a network and is only checked for shape)."""
    from datasets import Dataset

    from uat_hf.cli.arguments import DataArguments
    from uat_hf.cli.train_data import build_specs
    from uat_hf.data.corpora import CorpusSpec, load_corpus_split

    namespace: dict = {}
    exec(one_block("python", "CorpusSpec("), namespace)
    specs = namespace["specs"]
    assert all(isinstance(spec, CorpusSpec) for spec in specs)
    recipe = yaml.safe_load(one_block("yaml", "corpus_specs:"))
    from_recipe, _ = build_specs(DataArguments(corpus_specs=recipe["corpus_specs"]))
    assert from_recipe == specs

    pairs = [("The file is open.", "Die Datei ist offen."), ('He said "yes".', 'Er sagte "ja".')]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for split in ("train", "dev", "test"):
        with open(f"data/news.{split}.jsonl", "w", encoding="utf-8") as f:
            for en, de in pairs:
                f.write(json.dumps({"translation": {"en": en, "de": de}}) + "\n")
        with open(f"data/law.{split}.tsv", "w", encoding="utf-8") as f:
            f.writelines(f"{en}\t{de}\n" for en, de in pairs)
        Dataset.from_dict({"english": [en for en, _ in pairs], "german": [de for _, de in pairs]}).to_parquet(
            f"data/medical.{split}.parquet"
        )
    local = [spec for spec in specs if spec.path is None]
    assert [spec.name for spec in local] == ["news", "law", "medical"]
    for spec in local:
        for split in ("train", "dev", "test"):
            loaded = load_corpus_split(spec, split, cache_dir=str(tmp_path / "cache"))
            assert list(zip(loaded["source"], loaded["target"])) == pairs, (spec.name, split)
    hub = [spec for spec in specs if spec.path is not None]
    found = [(spec.path, spec.hub_config, spec.split_location("dev")) for spec in hub]
    assert found == [("wmt/wmt14", "de-en", "validation")]
