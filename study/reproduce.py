"""Does the archive reproduce? Archived runs trained again, then compared with the archive step by step.

    python study/reproduce.py --cells untranslated-A-proportional-drop --seeds 1     # train into runs/reproduce/
    python study/reproduce.py --cells multidomain-A-proportional --seeds 1 --runs DIR  # reruns already in DIR

The archive holds no weights, so the only way to trust a number of it after the code has moved on is to train the
run again. A rerun is trained as ``run.py`` trains (today's recipe of ``study/recipes``, the archived seed, one
thread) into ``<runs>/<cell>/seed<N>/``, a folder already holding a finished training is compared as it is, and
nothing is written to the archive. Compared with the archived run folder: every logged training step (what the
archived run logged: loss, grad norm, learning rate, the mix p), every update of ``balancing_history.jsonl``, what
the audit decided per corpus (signals flagged, clean share, pairs marked for ``drop``) and uat-train's test metrics.
Times are left out. On the CPU with one thread and the same frameworks a rerun is expected to be identical; on a
GPU it is not (CUDA kernels do not fix their summation order). Signals the audit gained after a run was archived
are listed, not counted as a difference, and where a rerun differs the frameworks and the CPU's vector instructions
of both are printed (``run.json`` records them since 2026-11-30).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts, however this one is loaded
from archive import ARCHIVE, STUDY, unpacked  # noqa: E402
from run import ROOT, TRAINED, Study, build_missing_corpora, machine, say, select  # noqa: E402

TIMING = ("runtime", "per_second", "seconds", "preparation_time")
#: What the audit decided for a corpus: what ``drop`` and ``reweight`` train on.
DECISIONS = ("clean_share", "kept_clean_share", "effective_size", "failing_pairs", "action", "not_measurable")


def _timeless(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if not key.endswith(TIMING)}


def _same(a, b) -> bool:
    """Equal, a NaN (a measure not measurable yet) equalling a NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _first_difference(label: str, archived: list[dict], rerun: list[dict]) -> str | None:
    if len(archived) != len(rerun):
        return f"{label}: {len(rerun)} entries, the archive {len(archived)}"
    for old, new in zip(archived, rerun):
        old, new = _timeless(old), _timeless(new)
        keys = sorted(key for key in old if not _same(old[key], new.get(key)))  # what the archive logged
        if keys:
            return f"{label}: first differs at step {new.get('step', old.get('step'))} in {', '.join(keys)}"
    return None


def _audit_differences(archived: dict, rerun: dict) -> tuple[list[str], list[str]]:
    """The audit's differences (its decisions, the signals flagged, the rates of the signals both runs have) and
    the signals it gained since. A decision the archived run did not record yet is not compared."""
    differences, added = [], set()
    old_corpora, new_corpora = archived.get("corpora", {}), rerun.get("corpora", {})
    for corpus in sorted(old_corpora.keys() | new_corpora.keys()):
        old, new = old_corpora.get(corpus, {}), new_corpora.get(corpus, {})
        old_signals, new_signals = old.get("signals", {}), new.get("signals", {})
        added |= new_signals.keys() - old_signals.keys()
        flagged = [{s for s, rate in signals.items() if rate["flagged"] and s in old_signals}
                   for signals in (old_signals, new_signals)]
        if flagged[0] != flagged[1]:
            differences.append(f"audit {corpus} flagged: {sorted(flagged[0])} -> {sorted(flagged[1])}")
        for key in DECISIONS:
            if key in old and old[key] != new.get(key):
                differences.append(f"audit {corpus} {key}: {old[key]} -> {new.get(key)}")
        for signal in sorted(old_signals):
            if old_signals[signal] != new_signals.get(signal):
                differences.append(f"audit {corpus} {signal}: {old_signals[signal]} -> {new_signals.get(signal)}")
    return differences, sorted(added)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def compare(archived: Path, rerun: Path) -> dict:
    """The differences between an archived run folder and a rerun's (uat-train's output folder)."""
    differences = []
    states = [json.loads((folder / "trainer_state.json").read_text())["log_history"] for folder in (archived, rerun)]
    differences.append(_first_difference("log history", *states))
    if (archived / "balancing_history.jsonl").is_file():
        differences.append(_first_difference("balancing history", _lines(archived / "balancing_history.jsonl"),
                                             _lines(rerun / "balancing_history.jsonl")))
    results = [json.loads((folder / "eval_results.json").read_text()) for folder in (archived, rerun)]
    audit, added = _audit_differences(results[0].get("corpus_audit", {}), results[1].get("corpus_audit", {}))
    differences += audit
    old, new = ({k: v for k, v in _timeless(r).items() if isinstance(v, (int, float))} for r in results)
    changed = sorted(k for k in old.keys() | new.keys() if not _same(old.get(k), new.get(k)))
    if changed:
        differences.append(f"test metrics: {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''} differ")
    return {"steps": len(states[1]), "mean_bleu": (old.get("eval_mean_bleu"), new.get("eval_mean_bleu")),
            "differences": [d for d in differences if d], "signals_added": added}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", required=True, help="archived cells, e.g. multidomain-A-proportional")
    parser.add_argument("--seeds", nargs="+", type=int, required=True)
    parser.add_argument("--runs", type=Path, default=Path("runs/reproduce"), help="where the reruns train")
    parser.add_argument("--recipes", type=Path, default=Path("study/recipes"), help="relative to the repository")
    parser.add_argument("--archive", type=Path, default=ARCHIVE, help="the archive's packs (study/archive.py)")
    args = parser.parse_args(argv)
    archived = unpacked(args.archive.resolve()) / STUDY
    runs = args.runs.resolve()
    os.chdir(ROOT)  # the recipes' corpus folders are relative to the repository, as run.py trains them
    # An archive path that holds nothing: a rerun is never "finished", and nothing is packed.
    study = Study(args.recipes, runs, runs / ".no-archive")
    selected = select(study.cells(), only=args.cells, seeds=args.seeds)
    missing = [run.name for run in selected
               if not (archived / run.cell / f"seed{run.seed}" / "trainer_state.json").is_file()]
    if missing:
        raise SystemExit(f"not in the archive: {', '.join(missing)}")
    build_missing_corpora(study, [run for run in selected if not (study.run_dir(run) / TRAINED).is_file()])
    failed = 0
    for run in selected:
        if not (study.run_dir(run) / TRAINED).is_file():
            say(f"{run.name}: training again into {study.run_dir(run)}")
            study.train(run)
        found = compare(archived / run.cell / f"seed{run.seed}", study.run_dir(run))
        failed += bool(found["differences"])
        old, new = found["mean_bleu"]
        print(f"{run.name}: {'identical' if not found['differences'] else 'DIFFERS'} over {found['steps']} logged "
              f"entries; test mean BLEU {old} (archive) / {new} (rerun)")
        for line in found["differences"]:
            print(f"  {line}")
        stack = json.loads((archived / run.cell / f"seed{run.seed}" / "run.json").read_text())["machine"]
        today = machine(stack.get("device", "cpu"))
        for key in ("frameworks", "cpu_capability"):
            if found["differences"] and stack.get(key) != today[key]:
                print(f"  {key}: the archive's {stack.get(key, 'not recorded')}, today's {today[key]}")
        if found["signals_added"]:
            print(f"  audit signals added since: {', '.join(found['signals_added'])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
