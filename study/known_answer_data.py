"""The known-answer corpora of the study (issue 36): two seeded transformations of the bundled sample
``uat_hf/bundled/multidomain-en-de`` whose right corpus mix is known in advance.

    python study/known_answer_data.py                      # writes runs/known-answer/{misaligned,duplicated}/
    python study/known_answer_data.py --out DIR --seed 36

Why: every strategy of the study's grid scored within noise of proportional sampling, and no cell had an answer
known beforehand, so a tie cannot tell "the strategies are as good as the right mix" from "they cannot find it".
Each folder here is a ``corpus_dir`` in the bundled layout (``<corpus>.<split>.jsonl.gz``) in which one corpus is
made harmful or inflated on purpose, with its dev and test sets untouched:

* ``misaligned``: the largest corpus (software) keeps its sources, but every training target is exchanged with
  that of a pair of (nearly) the same word lengths, so the word-ratio filter that catches ordinary misalignments
  keeps them. Training on it can only hurt; the right mix gives it (almost) nothing.
* ``duplicated``: the smallest corpus (dictionary) is repeated :data:`COPIES` times, as a user gets when one
  corpus reached them in several files. Its recipes turn ``dedupe`` off (the default would remove the copies),
  so proportional sampling over-samples it; the right mix is proportional over the corpora without the copies.

Everything is checked with the library's own cleaning (:func:`uat_hf.data.preprocessing.preprocess` with regime A's
filters), and each folder gets ``construction.json`` (seed, what changed, counts, shares, sha256 of every file)
and a ``README.md``. The same seed writes byte-identical files (gzip with mtime 0). ``study/run.py`` runs
this when a selected cell needs a folder that is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import hashlib
import json
import os
import re
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grid, when imported from elsewhere
import grid  # noqa: E402
import noise  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "uat_hf" / "bundled" / "multidomain-en-de"
OUT = ROOT / grid.KNOWN_ANSWER_DIR
#: Issue 36's number; any seed gives a valid construction, this one is the study's.
SEED = 36
SOURCE_LANG, TARGET_LANG = "en", "de"
MISALIGNED, DUPLICATED = grid.BROKEN_CORPUS["misaligned"], grid.BROKEN_CORPUS["duplicated"]
COPIES = 6
#: What the construction must reach (issue 36): the filters keep >= 95 % of the broken pairs, proportional
#: sampling gives the misaligned corpus >= 30 % and the duplicated one >= 40 % of the training examples.
MIN_SURVIVING, MIN_MISALIGNED_SHARE, MIN_DUPLICATED_SHARE = 0.95, 0.30, 0.40
SPLITS = ("train", "dev", "test")
MARKER = "construction.json"


# ----------------------------------------------------------------------------------- reading and cleaning


def read_pairs(file: Path, languages: tuple[str, str]) -> tuple[list[str], list[str]]:
    """Sources and targets (``languages``: their keys) of a bundled ``.jsonl.gz`` file, as written (unstripped)."""
    with gzip.open(file, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line)["translation"] for line in lines if line.strip()]
    return [row[languages[0]] for row in rows], [row[languages[1]] for row in rows]


def _base_fields(setup: str) -> dict:
    """The fields of the regime A grid whose corpora a setup breaks (grid.NOISE_BASES), before its own."""
    return grid.NOISE_BASES[noise.KINDS[setup][0].base if setup in noise.KINDS else "multidomain"]["fields"]


def bundled_sample(setup: str) -> Path:
    """The bundled folder a setup's corpora are derived from."""
    return ROOT / "uat_hf" / "bundled" / _base_fields(setup)["corpus_dir"].removeprefix("bundled:")


def pair_languages(setup: str, corpus: str) -> tuple[str, str]:
    """The keys of a corpus's source and target in its files: its languages as uat-train reads them from the
    bundled sample the setup breaks."""
    from uat_hf.cli.train_data import build_specs

    specs, _ = build_specs(_data_arguments(_base_fields(setup)))
    spec = next(spec for spec in specs if spec.name == corpus)
    return spec.source_lang, spec.target_lang


def _data_arguments(fields: dict):
    """The :class:`~uat_hf.cli.arguments.DataArguments` of a recipe's ``fields`` (its other fields left out)."""
    from uat_hf.cli.arguments import DataArguments

    names = {f.name for f in dataclasses.fields(DataArguments)}
    return DataArguments(**{key: value for key, value in fields.items() if key in names})


def recipe_preprocessing(setup: str = "multidomain", *, dedupe: bool | None = None):
    """The :class:`~uat_hf.data.preprocessing.PreprocessingConfig` the regime A recipes of ``setup`` give uat-train
    (built as ``uat_hf.cli.train_data.load_data`` builds it); ``dedupe`` overrides the recipe's."""
    from uat_hf.data.preprocessing import PreprocessingConfig

    fields = dict(grid.settings(setup, "A")["fields"])
    if dedupe is not None:
        fields["dedupe"] = dedupe
    data = _data_arguments(fields)
    return PreprocessingConfig(max_length_ratio=data.max_length_ratio, max_source_words=data.max_source_words,
                               max_target_words=data.max_target_words, dedupe=data.dedupe)


def kept_rows(sources: list[str], targets: list[str], config, corpus: str) -> list[int]:
    """The rows that uat-train's cleaning keeps (:func:`uat_hf.data.preprocessing.preprocess` on the train split)."""
    import datasets

    from uat_hf.data.preprocessing import preprocess

    table = datasets.Dataset.from_dict({"source": sources, "target": targets, "row": list(range(len(sources)))})
    return preprocess(table, config, corpus=corpus, split="train").select_columns(["row"]).to_dict()["row"]


def words(text: str) -> int:
    """Whitespace words, as the length filters count them."""
    return len(text.split())


def normalise(text: str) -> str:
    """Lower case, letters and digits only: ``_Abbrechen`` and ``Abbrechen…`` are the same target."""
    return re.sub(r"[\W_]+", "", text.lower())


# ----------------------------------------------------------------------------------- misaligned


def derange(sources: list[str], targets: list[str], seed: int) -> list[int]:
    """``donor[k]``: the pair whose target pair ``k`` receives; a derangement in which every pair is broken.

    Pairs are ordered by (target words, source words), ties in a seeded random order, and cut into groups of two
    consecutive pairs (the last of three when the count is odd) that exchange their targets (a 3-cycle for the
    triple). So a pair nearly always receives a target of exactly its own target's and source's word counts,
    which the length-ratio filter cannot tell from its own. A pair counts as broken when the target it receives
    (normalised: :func:`normalise`) is none of the targets its source (normalised) has anywhere in the corpus:
    swapping ``Cancel → Abbrechen`` with ``_Cancel → _Abbrechen``, or two translations of one source, breaks
    nothing. A group that would leave a pair unbroken exchanges one member with the nearest group where that
    makes both groups break every pair.
    """
    count = len(targets)
    if count < 2:
        raise ValueError("a derangement needs at least 2 pairs")
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(count), [words(s) for s in sources], [words(t) for t in targets]))
    groups = [[int(k) for k in order[i:i + 2]] for i in range(0, count - count % 2, 2)]
    if count % 2:
        groups[-1].append(int(order[-1]))
    norm_sources, norm_targets = [normalise(s) for s in sources], [normalise(t) for t in targets]
    translations: dict[str, set[str]] = defaultdict(set)
    for source, target in zip(norm_sources, norm_targets):
        translations[source].add(target)

    def broken(group: list[int]) -> bool:
        return all(norm_targets[group[(j + 1) % len(group)]] not in translations[norm_sources[k]]
                   for j, k in enumerate(group))

    for g, group in enumerate(groups):
        if not broken(group) and not _repair(groups, g, broken):
            raise RuntimeError(f"no derangement found for pairs {group}: too many identical targets")
    donor = np.empty(count, dtype=int)
    for group in groups:
        for j, k in enumerate(group):
            donor[k] = group[(j + 1) % len(group)]
    return donor.tolist()


def _repair(groups: list[list[int]], g: int, broken, reach: int = 100) -> bool:
    """Exchange one member of group ``g`` with one of the nearest group (within ``reach`` groups) where both
    groups then break every pair; ``False`` when none does."""
    for distance in range(1, reach + 1):
        for h in (g + distance, g - distance):
            if not 0 <= h < len(groups):
                continue
            for x in range(len(groups[g])):
                for y in range(len(groups[h])):
                    groups[g][x], groups[h][y] = groups[h][y], groups[g][x]
                    if broken(groups[g]) and broken(groups[h]):
                        return True
                    groups[g][x], groups[h][y] = groups[h][y], groups[g][x]
    return False


def misaligned_pairs(seed: int) -> tuple[list[str], list[str], dict]:
    """The misaligned corpus's training pairs (the rows regime A's cleaning keeps, in file order, with deranged
    targets) and what the construction did."""
    raw_sources, raw_targets = read_pairs(BUNDLED / f"{MISALIGNED}.train.jsonl.gz", (SOURCE_LANG, TARGET_LANG))
    rows = kept_rows(raw_sources, raw_targets, recipe_preprocessing(), MISALIGNED)
    sources, targets = [raw_sources[k] for k in rows], [raw_targets[k] for k in rows]
    donor = derange(sources, targets, seed)
    moved = [targets[d] for d in donor]
    gaps = Counter(abs(words(new) - words(old)) for new, old in zip(moved, targets))
    source_gaps = Counter(abs(words(targets[d]) - words(targets[k])) + abs(words(sources[d]) - words(sources[k]))
                          for k, d in enumerate(donor))
    return sources, moved, {
        "raw_pairs": len(raw_sources), "clean_pairs": len(rows),
        "broken_pairs": len(rows),
        "target_word_count_unchanged": gaps[0], "largest_target_word_gap": max(gaps),
        "donor_with_same_source_and_target_word_counts": source_gaps[0],
    }


# ----------------------------------------------------------------------------------- writing


def write_jsonl_gz(file: Path, sources: list[str], targets: list[str], languages: tuple[str, str]) -> None:
    """One ``{"translation": {"en": ..., "de": ...}}`` line per pair (``languages``: the keys), as the bundled files
    are; gzip with mtime 0, so that the same pairs always give the same bytes."""
    lines = "".join(json.dumps({"translation": dict(zip(languages, (s, t)))}, ensure_ascii=False) + "\n"
                    for s, t in zip(sources, targets))
    write_gz(file, lines.encode("utf-8"))


def write_gz(file: Path, data: bytes) -> None:
    with gzip.GzipFile(file, "wb", mtime=0) as out:
        out.write(data)


def _copy_unchanged(folder: Path, skip: str, bundled: Path) -> None:
    """Every file of the bundled folder but ``skip`` (a corpus's train file), byte for byte."""
    for file in sorted(bundled.glob("*.jsonl.gz")):
        if file.name != skip:
            shutil.copyfile(file, folder / file.name)


def train_sizes(folder: Path, config, setup: str = "multidomain") -> dict[str, int]:
    """Training pairs of every corpus of ``folder`` (a ``setup``'s) after the cleaning ``config``."""
    sizes = {}
    for file in sorted(folder.glob("*.train.jsonl.gz")):
        corpus = file.name.split(".")[0]
        sizes[corpus] = len(kept_rows(*read_pairs(file, pair_languages(setup, corpus)), config, corpus))
    return sizes


def shares(sizes: dict[str, int]) -> dict[str, float]:
    total = sum(sizes.values())
    return {corpus: round(size / total, 4) for corpus, size in sizes.items()}


def build_misaligned(folder: Path, seed: int) -> dict:
    sources, targets, record = misaligned_pairs(seed)
    _copy_unchanged(folder, f"{MISALIGNED}.train.jsonl.gz", BUNDLED)
    write_jsonl_gz(folder / f"{MISALIGNED}.train.jsonl.gz", sources, targets, (SOURCE_LANG, TARGET_LANG))
    sizes = train_sizes(folder, recipe_preprocessing("misaligned"))
    surviving = sizes[MISALIGNED] / record["broken_pairs"]
    share = sizes[MISALIGNED] / sum(sizes.values())
    if surviving < MIN_SURVIVING or share < MIN_MISALIGNED_SHARE:
        raise RuntimeError(f"misaligned: {surviving:.1%} of the broken pairs survive the filters, proportional gives "
                           f"{MISALIGNED} {share:.1%}: below {MIN_SURVIVING:.0%} / {MIN_MISALIGNED_SHARE:.0%}")
    return {
        "setup": "misaligned", "seed": seed, "changed": f"{MISALIGNED}.train.jsonl.gz",
        "what": f"{MISALIGNED}'s training pairs that regime A's cleaning keeps (strip, length-ratio filter, dedupe), "
                "in file order, each given the target of another pair of (nearly) the same target and source word "
                "counts (study/known_answer_data.py, derange): every pair broken. The other corpora and all "
                "dev and test sets are the bundled files, byte for byte.",
        **record, "surviving_filters": sizes[MISALIGNED], "surviving_share": round(surviving, 4),
        "train_pairs_after_cleaning": sizes, "proportional_shares": shares(sizes),
    }


def build_duplicated(folder: Path, seed: int) -> dict:
    _copy_unchanged(folder, f"{DUPLICATED}.train.jsonl.gz", BUNDLED)
    with gzip.open(BUNDLED / f"{DUPLICATED}.train.jsonl.gz", "rb") as original:
        write_gz(folder / f"{DUPLICATED}.train.jsonl.gz", original.read() * COPIES)
    sizes = train_sizes(folder, recipe_preprocessing("duplicated"))  # dedupe off, as its recipes say
    deduplicated = train_sizes(folder, recipe_preprocessing("duplicated", dedupe=True))
    share = sizes[DUPLICATED] / sum(sizes.values())
    if share < MIN_DUPLICATED_SHARE or sizes[DUPLICATED] != COPIES * deduplicated[DUPLICATED]:
        raise RuntimeError(f"duplicated: proportional gives {DUPLICATED} {share:.1%} (< {MIN_DUPLICATED_SHARE:.0%}?), "
                           f"{sizes[DUPLICATED]} pairs for {COPIES} x {deduplicated[DUPLICATED]}")
    return {
        "setup": "duplicated", "seed": seed, "changed": f"{DUPLICATED}.train.jsonl.gz",
        "what": f"{DUPLICATED}'s training file repeated {COPIES} times (the bundled rows, {COPIES} consecutive "
                "copies; nothing is random, the seed is recorded for uniformity). The recipes set dedupe: false, "
                "else the cleaning would remove the copies. The other corpora and all dev and test sets are the "
                "bundled files, byte for byte.",
        "copies": COPIES, "train_pairs_after_cleaning": sizes, "proportional_shares": shares(sizes),
        "train_pairs_deduplicated": deduplicated, "deduplicated_proportional_shares": shares(deduplicated),
    }


#: Where the wrong-language kind finds its translations: the multi-way parallel Debian descriptions (the bundled
#: descriptions corpus is a sample of their English-German side). Only the study reads ../shared.
OTHER_LANGUAGE = "it"
OTHER_LANGUAGE_FILE = ROOT.parent / "shared" / "corpora" / "multilingual-ddtp" / f"{OTHER_LANGUAGE}.train.jsonl.gz"


def build_noise(folder: Path, seed: int, setup: str) -> dict:
    """One corpus of the bundled sample broken by a kind of :mod:`noise` (the rows regime A's cleaning keeps, in
    file order); the others and every dev and test set byte for byte."""
    kind, transform = noise.KINDS[setup]
    bundled, languages = bundled_sample(setup), pair_languages(setup, kind.corpus)
    raw_sources, raw_targets = read_pairs(bundled / f"{kind.corpus}.train.jsonl.gz", languages)
    rows = kept_rows(raw_sources, raw_targets, recipe_preprocessing(setup, dedupe=True), kind.corpus)
    sources, targets = [raw_sources[k] for k in rows], [raw_targets[k] for k in rows]
    extra = {}
    if transform is noise.wrong_language:
        with gzip.open(OTHER_LANGUAGE_FILE, "rt", encoding="utf-8") as lines:
            extra["other"] = {row["en"]: row[OTHER_LANGUAGE] for row in (json.loads(line)["translation"]
                                                                       for line in lines if line.strip())}
    if hasattr(transform, "share"):
        extra["derange"] = derange
    noisy_sources, noisy_targets = transform(sources, targets, np.random.default_rng(seed), **extra)
    _copy_unchanged(folder, f"{kind.corpus}.train.jsonl.gz", bundled)
    write_jsonl_gz(folder / f"{kind.corpus}.train.jsonl.gz", noisy_sources, noisy_targets, languages)
    sizes = train_sizes(folder, recipe_preprocessing(setup), setup)
    changed = sum(s != s0 or t != t0 for s, t, s0, t0 in zip(noisy_sources, noisy_targets, sources, targets))
    return {
        "setup": setup, "seed": seed, "changed": f"{kind.corpus}.train.jsonl.gz",
        "what": f"{kind.corpus}: {kind.about} (study/noise.py, {transform.__name__}), from the {len(rows)} training "
                "pairs regime A's cleaning keeps. The other corpora and all dev and test sets are the bundled files, "
                "byte for byte.",
        "clean_pairs": len(rows), "noisy_pairs": len(noisy_sources), "pairs_changed_in_place": changed,
        "train_pairs_after_cleaning": sizes, "proportional_shares": shares(sizes),
    }


BUILDERS = {"misaligned": build_misaligned, "duplicated": build_duplicated,
            **{setup: functools.partial(build_noise, setup=setup) for setup in noise.KINDS}}


def build(out: Path = OUT, seed: int = SEED, setups: tuple[str, ...] = tuple(BUILDERS)) -> dict[str, dict]:
    """Write ``out/<setup>/`` for each setup (into a temporary folder renamed at the end, so that a folder with
    ``construction.json`` is always complete); returns each construction record."""
    import datasets

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a bar per map() of the cleaning is noise here
    try:
        return {setup: _build_one(out, seed, setup) for setup in setups}
    finally:
        if bars:
            datasets.enable_progress_bars()


def _build_one(out: Path, seed: int, setup: str) -> dict:
    folder, partial = out / setup, out / f"{setup}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    record = BUILDERS[setup](partial, seed)
    record["files"] = {file.name: hashlib.sha256(file.read_bytes()).hexdigest()
                       for file in sorted(partial.glob("*.jsonl.gz"))}
    record["rebuild"] = f"python study/known_answer_data.py --seed {seed}"
    (partial / "README.md").write_text(readme(record), encoding="utf-8")
    (partial / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return record


def built(folder: Path) -> bool:
    """Whether ``folder`` is a finished construction (its ``construction.json`` is written last)."""
    return (folder / MARKER).is_file()


def readme(record: dict) -> str:
    sizes = ", ".join(f"{c} {n}" for c, n in record["train_pairs_after_cleaning"].items())
    lines = [f"# Known-answer corpora: {record['setup']}", "",
             "Written by `study/known_answer_data.py` (study/study.md, \"Known-answer cells\"); do not edit: "
             f"rebuild with `{record['rebuild']}`.", "", record["what"], "",
             f"Seed {record['seed']}. Training pairs after the recipes' cleaning: {sizes}; proportional shares "
             f"{record['proportional_shares']}."]
    if record["setup"] in noise.KINDS:
        lines.append(f"{record['noisy_pairs']} noisy training pairs from {record['clean_pairs']} clean ones; "
                     f"{record['pairs_changed_in_place']} differ from the pair at their place.")
    elif record["setup"] == "misaligned":
        lines.append(f"{record['broken_pairs']} pairs broken; {record['surviving_filters']} "
                     f"({record['surviving_share']:.2%}) survive the filters; "
                     f"{record['target_word_count_unchanged']} received a target of their own target's word count "
                     f"(largest difference {record['largest_target_word_gap']} words).")
    else:
        lines.append(f"Without the copies (dedupe on): {record['train_pairs_deduplicated']}; the known answer is "
                     f"that proportional prior, {record['deduplicated_proportional_shares']}.")
    lines += ["", "sha256 of the files: construction.json."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {grid.KNOWN_ANSWER_DIR}")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for setup, record in build(args.out, args.seed).items():
        print(f"{args.out / setup}: train pairs after cleaning {record['train_pairs_after_cleaning']}, proportional "
              f"{record['proportional_shares']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
