"""The paper's comparison (Wu et al., EMNLP 2021, Tables 1–3 and Figures 1–3) at the scale of a CPU box.

One model size, one step budget and the same seeds for every strategy:

* static priors: ``proportional`` (τ = 1), ``temperature`` (τ = 5), ``uniform`` (τ = ∞);
* dynamic: ``multidds-s`` (gradient cosine) and ``multiuat-<measure>`` (MC-dropout uncertainty), by default
  with the measures EntEOS, ExpTP and EntSent.

Two setups: ``multidomain`` (English→German, domains software / descriptions / bible / dictionary) and
``multilingual`` (X→English over a diverse subset of DDTP languages of very different sizes).

    python benchmarks/reproduction.py --data-dir ../shared/corpora/multidomain-en-de --setup multidomain \\
        --out runs/repro --seeds 1 2 3 --docs docs/results.md
    python benchmarks/reproduction.py --data-dir ../shared/corpora/multilingual-ddtp --setup multilingual \\
        --out runs/repro --seeds 1 2 3 --docs docs/results.md
    python benchmarks/reproduction.py --out runs/repro --docs docs/results.md --report-only   # page only

Layout under ``--out``::

    <setup>/prepared/            tokenizer (trained once per setup), tokenized train/dev, raw test pairs, meta.json
    <setup>/<strategy>/seed<k>/  results.json (written last: its presence means "finished"), hyp/<corpus>.txt,
                                 balancing_history.jsonl (dynamic strategies), checkpoint-* while running
    <setup>/significance.json    cache of the paired tests

A rerun skips every run whose ``results.json`` exists and resumes an interrupted one from its last checkpoint
(``UATTrainer.train(resume_from_checkpoint=True)``: model, optimizer, sampler and scorer state). The results
page (``--docs``) and its figures (``<docs dir>/figures/``) are regenerated from whatever has finished under
``--out``, for both setups, after every run; runs not finished yet are marked.

Evaluation: greedy decoding of the first ``--eval-sentences`` sentences of each corpus's test split, sacreBLEU
(13a) and chrF on detokenized text; the mean is the unweighted (macro) mean over corpora, as in the paper.
Significance: sacrebleu's paired bootstrap resampling (1000 resamples) of each strategy against the best
static prior (highest mean BLEU averaged over seeds), same seed against same seed, on the CONCATENATED test
outputs of all corpora (one corpus-level BLEU over every test sentence of the setup).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import hashlib
import json
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

RESULTS_FILE = "results.json"
SIGNIFICANCE_FILE = "significance.json"
PREPARED_DIR = "prepared"
HYP_DIR = "hyp"

STATIC = ("proportional", "temperature", "uniform")
DEFAULT_STRATEGIES = ("proportional", "temperature", "uniform", "multidds-s",
                      "multiuat-enteos", "multiuat-exptp", "multiuat-entsent")

#: Per-setup defaults. ``corpora``: wanted corpora, in this order (those missing from --data-dir are skipped).
SETUPS: dict[str, dict[str, Any]] = {
    "multidomain": {
        "title": "Multi-domain English→German",
        "direction": "multi-domain",
        "source_lang": "en",
        "target_lang": "de",
        "corpora": ["software", "descriptions", "bible", "dictionary"],
        "vocab_size": 8000,
        "max_length_ratio": 1.5,  # Moses-style length-ratio cleaning of the training pairs, in whitespace words
        "steps": 240,
        "updates": 6,
        "eval_sentences": 200,
        "bleu_tokenize": "13a",
    },
    "multilingual": {
        "title": "Multilingual X→English (many-to-one)",
        "direction": "many-to-one",
        "source_lang": None,
        "target_lang": "en",
        # The README's "diverse" group: 137K (it) down to 1.6K (zh_CN) training pairs.
        "corpora": ["it", "fr", "de", "ja", "ko", "ru", "cs", "zh_CN"],
        "vocab_size": 10000,
        # No length-ratio filter: it counts whitespace-separated words, and Japanese/Chinese sources have almost
        # none, so a 1.5 ratio would drop most ja and zh_CN training pairs (measured: ~80%).
        "max_length_ratio": None,
        "steps": 240,
        "updates": 6,  # MultiDDS-S costs N·(N+1) forward/backward passes per update: fewer updates with N = 8
        "eval_sentences": 150,
        "bleu_tokenize": "13a",
    },
}

#: The paper's scale, for the page (what we can state without their logs).
PAPER_SCALE = {
    "multidomain": "fairseq `transformer` (base: 6+6 layers, d=512, ~60M parameters), 32K joint BPE, full WMT14 en–de "
                   "(4.5M pairs) plus Tanzil, EMEA and KDE4, trained to convergence; S = 1000, K = 30, beam search",
    "multilingual": "fairseq `transformer_iwslt_de_en` (6+6 layers, d=512, FFN 1024), joint BPE, full TED-8 related/"
                    "diverse corpora, trained to convergence; S = 2000, K = 30, beam search",
}

#: Heuristic CPU speed of the presets (seconds per optimizer step at a 3,000-token batch, 2 quiet cores) used
#: for the time estimate until runs of the same preset have finished under --out (then those are used).
PRESET_STEP_SECONDS = {"tiny": 0.06, "small": 1.33}
#: Seconds per test sentence of greedy decoding (batch 64), per preset; same caveat.
PRESET_DECODE_SECONDS = {"tiny": 0.004, "small": 0.08}



# ---------------------------------------------------------------------------------------------- helpers


def say(message: str) -> None:
    print(f"[repro {_dt.datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def parse_strategy(name: str) -> dict[str, Any]:
    """Run name → UATConfig fields. ``multiuat`` alone means ``multiuat-enteos``."""
    if name in STATIC:
        return {"strategy": name}  # temperature: τ = 5, the strategy's own
    if name == "multidds-s":
        return {"strategy": "multidds-s"}
    if name == "multiuat" or name.startswith("multiuat-"):
        from uat_hf.measures import MEASURES, RELEASED_CODE_MEASURES

        measure = name.split("-", 1)[1] if "-" in name else "enteos"
        if measure not in MEASURES + RELEASED_CODE_MEASURES:
            raise SystemExit(f"Unknown measure in {name!r}; choose "
                             f"multiuat-<{'|'.join(MEASURES + RELEASED_CODE_MEASURES)}>.")
        return {"strategy": "multiuat", "measure": measure}
    raise SystemExit(f"Unknown strategy {name!r}; choose from {', '.join(DEFAULT_STRATEGIES)} or multiuat-<measure>.")


def canonical_strategy(name: str) -> str:
    return "multiuat-enteos" if name == "multiuat" else name


def machine_info() -> dict[str, Any]:
    import torch
    import transformers

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_label(info: Mapping[str, Any]) -> str:
    device = f"GPU {info['gpu']}" if info.get("gpu") else f"CPU only, {info.get('torch_threads')} torch threads"
    return f"{info.get('cpu')} ({info.get('cpu_count')} logical CPUs visible), {device}; torch {info.get('torch')}"


def count_lines(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return default


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # atomic: a results.json is never half written


def normalized_entropy(p: Sequence[float]) -> float:
    p = np.asarray(p, dtype=np.float64)
    if p.size < 2:
        return 1.0
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum() / math.log(p.size))


def mean_sd(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(statistics.fmean(values)), (float(statistics.stdev(values)) if len(values) > 1 else None)


def fmt_mean_sd(values: Sequence[float], expected: int) -> str:
    mean, sd = mean_sd(values)
    if mean is None:
        return "—"
    text = f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")
    if len(values) < expected:
        text += f" ({len(values)}/{expected})"
    return text


def fmt_minutes(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------------------------------------- data


def setup_settings(options: argparse.Namespace) -> dict[str, Any]:
    """Everything that fixes the prepared data of a setup (a different value needs another --out)."""
    defaults = SETUPS[options.setup]
    return {
        "setup": options.setup,
        "data_dir": str(Path(options.data_dir).resolve()),
        "corpora": options.corpora or defaults["corpora"],
        "max_train_examples": options.max_train_examples,
        "vocab_size": options.vocab_size or defaults["vocab_size"],
        "max_length": options.max_length,
        "eval_sentences": options.eval_sentences or defaults["eval_sentences"],
        "max_length_ratio": defaults["max_length_ratio"],
        "subsample_seed": 0,
    }


def prepare_setup(options: argparse.Namespace, setup_dir: Path) -> dict[str, Any]:
    """Tokenizer + tokenized train/dev + raw test pairs, built once per setup and reused by every run."""
    from uat_hf.corpora import (
        PreprocessingConfig,
        add_language_tags,
        corpus_specs_from_directory,
        corpus_tags,
        load_corpus_split,
        preprocess,
        tokenize_corpus,
    )
    from uat_hf.tokenization import load_tokenizer, train_joint_tokenizer

    settings = setup_settings(options)
    prepared = setup_dir / PREPARED_DIR
    meta_path = prepared / "meta.json"
    previous = read_json(meta_path)
    if previous is not None:
        # The data directory may have moved (runs unpacked on another machine); every other setting must match.
        changed = {k: (previous["settings"].get(k), v) for k, v in settings.items()
                   if k != "data_dir" and previous["settings"].get(k) != v}
        if changed:
            raise SystemExit(
                f"{setup_dir} was prepared with other data settings {changed} (old, new). Runs must share one "
                "tokenizer and one data sample: use the old settings or another --out."
            )
        if _prepared_complete(prepared, previous):
            say(f"{options.setup}: reusing the prepared tokenizer and data in {prepared}")
            return previous
        say(f"{options.setup}: {prepared} holds the finished runs' metadata but not the tokenizer and tokenized data "
            "(e.g. runs unpacked from an archive); preparing them again with the same settings")

    defaults = SETUPS[options.setup]
    data_dir = Path(options.data_dir)
    available = sorted(p.name.split(".")[0] for p in data_dir.glob("*.train.*"))
    wanted = [c for c in settings["corpora"] if c in available]
    missing = [c for c in settings["corpora"] if c not in available]
    if missing:
        say(f"{options.setup}: corpora {missing} are not in {data_dir}; using {wanted}")
    if len(wanted) < 2:
        raise SystemExit(f"Need at least two of the corpora {settings['corpora']} in {data_dir} (found {available}).")
    specs = corpus_specs_from_directory(data_dir, defaults["source_lang"], defaults["target_lang"],
                                        corpora=wanted, direction=defaults["direction"])
    start = time.perf_counter()
    full_sizes = {s.name: count_lines(Path(s.train)) for s in specs}
    # --max-train-examples caps the LARGEST corpus; every corpus is subsampled by the same factor, so the size
    # ratios (and with them the proportional and temperature priors) stay those of the full corpora.
    cap = settings["max_train_examples"]
    factor = min(1.0, cap / max(full_sizes.values())) if cap else 1.0
    preprocessing = PreprocessingConfig(max_length_ratio=settings["max_length_ratio"])
    tag_of = corpus_tags(specs, "auto")
    raw_train, raw_dev, raw_test = {}, {}, {}
    for spec in specs:
        train = load_corpus_split(spec, "train")
        if factor < 1.0:
            keep = max(1, round(len(train) * factor))
            train = train.shuffle(seed=settings["subsample_seed"]).select(range(keep))
        raw_train[spec.name] = add_language_tags(preprocess(train, preprocessing, corpus=spec.name, split="train"),
                                                 target_tag=tag_of[spec.name])
        raw_dev[spec.name] = add_language_tags(preprocess(load_corpus_split(spec, "dev"), preprocessing,
                                                          corpus=spec.name, split="dev"), target_tag=tag_of[spec.name])
        test = add_language_tags(preprocess(load_corpus_split(spec, "test"), preprocessing, corpus=spec.name,
                                            split="test"), target_tag=tag_of[spec.name])
        raw_test[spec.name] = test.select(range(min(settings["eval_sentences"], len(test))))
    sizes = {"corpora": wanted, "train_sizes": {n: len(d) for n, d in raw_train.items()},
             "dev_sizes": {n: len(d) for n, d in raw_dev.items()},
             "test_sizes": {n: len(d) for n, d in raw_test.items()}}
    _check_same_preparation(previous, sizes, options.setup, data_dir, setup_dir)
    say(f"{options.setup}: training a joint BPE tokenizer (vocab {settings['vocab_size']}) on "
        f"{sum(len(d) for d in raw_train.values()):,} training pairs")
    tokenizer = train_joint_tokenizer(list(raw_train.values()), vocab_size=settings["vocab_size"],
                                      special_tokens=sorted({t for t in tag_of.values() if t}),
                                      model_max_length=settings["max_length"])
    _check_same_preparation(previous, {"vocab_size": len(tokenizer)}, options.setup, data_dir, setup_dir)
    tokenizer.save_pretrained(prepared / "tokenizer")
    tokenizer = load_tokenizer(str(prepared / "tokenizer"))
    for split, raw in (("train", raw_train), ("dev", raw_dev)):
        for name, dataset in raw.items():
            tokenize_corpus(dataset, tokenizer, max_source_length=settings["max_length"],
                            max_target_length=settings["max_length"]).save_to_disk(str(prepared / split / name))
    for name, dataset in raw_test.items():
        write_json(prepared / "test" / f"{name}.json",
                   {"source": list(dataset["source"]), "target": list(dataset["target"])})
    meta = {
        "settings": settings,
        **sizes,
        "full_train_sizes": full_sizes,
        "subsample_factor": factor,
        "vocab_size": len(tokenizer),
        "prepare_seconds": time.perf_counter() - start,
    }
    write_json(meta_path, meta)
    say(f"{options.setup}: prepared in {meta['prepare_seconds']:.0f} s; train sizes {meta['train_sizes']}")
    return meta


def _check_same_preparation(previous: Mapping[str, Any] | None, fresh: Mapping[str, Any], setup: str, data_dir: Path,
                            setup_dir: Path) -> None:
    """Preparing again is deterministic (same files, subsample seed and BPE training), so it must reproduce the corpora
    and vocabulary the finished runs used -- checked before anything is written, else old and new runs would mix."""
    if previous is None:
        return
    differs = [k for k, v in fresh.items() if previous.get(k) != v]
    if differs:
        raise SystemExit(f"Preparing {setup} again from {data_dir} gave other {differs} than the finished runs under "
                         f"{setup_dir} used: is it the same data? Use another --out for new data.")


def _prepared_complete(prepared: Path, meta: Mapping[str, Any]) -> bool:
    folders = [prepared / "tokenizer"]
    folders += [prepared / split / name for split in ("train", "dev") for name in meta["corpora"]]
    return all(folder.is_dir() for folder in folders)


def load_prepared(setup_dir: Path, meta: Mapping[str, Any]):
    from datasets import load_from_disk

    from uat_hf.tokenization import load_tokenizer

    prepared = setup_dir / PREPARED_DIR
    tokenizer = load_tokenizer(str(prepared / "tokenizer"))
    train = {n: load_from_disk(str(prepared / "train" / n)) for n in meta["corpora"]}
    dev = {n: load_from_disk(str(prepared / "dev" / n)) for n in meta["corpora"]}
    test = {n: read_json(prepared / "test" / f"{n}.json") for n in meta["corpora"]}
    return tokenizer, train, dev, test


# ---------------------------------------------------------------------------------------------- runs


def run_settings(options: argparse.Namespace) -> dict[str, Any]:
    """The training/evaluation settings every run of this invocation uses (recorded in each results.json)."""
    steps = options.steps or SETUPS[options.setup]["steps"]
    return {
        "preset": options.preset,
        "steps": steps,
        "max_tokens": options.max_tokens,
        "learning_rate": options.lr,
        "warmup_steps": options.warmup if options.warmup is not None else max(1, steps // 6),
        "lr_scheduler": "inverse_sqrt",
        "label_smoothing": 0.1,
        "update_every": options.update_every or max(1, steps // SETUPS[options.setup]["updates"]),
        "mc_samples": options.mc_samples,
        "scorer_lr": options.scorer_lr,
        "scorer_steps": options.scorer_steps,
        "dev_batch_tokens": options.dev_batch_tokens,
        "dds_train_batch_tokens": options.dev_batch_tokens,
        "decoding": "greedy",
        "generation_max_new_tokens": options.max_new_tokens,
        "eval_batch_size": 64,
        "save_steps": options.save_every or max(1, steps // 4),
    }


def run_dir_of(setup_dir: Path, strategy: str, seed: int) -> Path:
    return setup_dir / strategy / f"seed{seed}"


def train_one(options, setup_dir: Path, meta, prepared, strategy: str, seed: int, settings: Mapping[str, Any]) -> dict:
    import torch
    from transformers import set_seed
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import get_last_checkpoint

    from uat_hf.evaluation import translate, write_hypotheses
    from uat_hf.metrics import macro_average, translation_scores
    from uat_hf.presets import build_model
    from uat_hf.uat_config import UATConfig
    from uat_hf.uat_trainer import UATTrainer

    tokenizer, train, dev, test = prepared
    run_dir = run_dir_of(setup_dir, strategy, seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    resume = get_last_checkpoint(str(run_dir)) is not None
    if not resume:
        # An attempt stopped before its first checkpoint: start clean (the balancing history is appended to).
        from uat_hf.checkpoints import HISTORY_FILE

        (run_dir / HISTORY_FILE).unlink(missing_ok=True)
        (run_dir / "partial_time.json").unlink(missing_ok=True)
    set_seed(seed)
    model = build_model(options.preset, tokenizer, num_beams=1)
    save_steps = settings["save_steps"]
    args = UATConfig(
        output_dir=str(run_dir),
        **parse_strategy(strategy),
        max_steps=settings["steps"],
        max_tokens=settings["max_tokens"],
        learning_rate=settings["learning_rate"],
        warmup_steps=settings["warmup_steps"],
        lr_scheduler_type=settings["lr_scheduler"],
        label_smoothing_factor=settings["label_smoothing"],
        adam_beta1=0.9,
        adam_beta2=0.98,
        weight_decay=0.0,
        update_every=settings["update_every"],
        mc_samples=settings["mc_samples"],
        scorer_lr=settings["scorer_lr"],
        scorer_steps=settings["scorer_steps"],
        dev_batch_tokens=settings["dev_batch_tokens"],
        dds_train_batch_tokens=settings["dds_train_batch_tokens"],
        eval_strategy="no",
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=1,
        logging_steps=max(1, settings["steps"] // 10),
        report_to=[],
        disable_tqdm=True,
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        bleu_tokenize=SETUPS[options.setup]["bleu_tokenize"],
    )
    previous = read_json(run_dir / "partial_time.json", {}) if resume else {}
    clock = _SaveClock(run_dir / "partial_time.json", float(previous.get("seconds", 0.0)))
    label = f"{options.setup}/{strategy}/seed{seed}"
    trainer = UATTrainer(model, args, train_corpora=train, dev_corpora=dev, eval_corpora={},
                         processing_class=tokenizer, callbacks=[clock, _progress_callback(label, settings["steps"])])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # raw log dicts; the progress callback prints a readable line instead
    names = list(trainer.corpus_sampler.names)
    initial = dict(zip(names, trainer.corpus_sampler.probabilities.tolist()))
    say(f"{label}: {'resuming from the last checkpoint' if resume else 'training'} "
        f"({settings['steps']} steps, {model.num_parameters():,} parameters)")
    start = time.perf_counter()
    checkpoint = get_last_checkpoint(str(run_dir)) if resume else None
    checkpoint_state = read_json(Path(checkpoint) / TRAINER_STATE_NAME, {}) if checkpoint else {}
    if checkpoint and checkpoint_state.get("global_step", 0) >= settings["steps"]:
        # Training had finished and only the evaluation was interrupted. Trainer.train would still take one more
        # step when resumed at max_steps, so restore the final model and balancing state from the checkpoint instead.
        from transformers import AutoModelForSeq2SeqLM

        from uat_hf.checkpoints import BALANCING_STATE_FILE

        trainer.model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint)
        if (Path(checkpoint) / BALANCING_STATE_FILE).is_file():
            trainer.balancing.load(str(Path(checkpoint) / BALANCING_STATE_FILE))
        steps_done = int(checkpoint_state["global_step"])
        log_history, training_loss = checkpoint_state.get("log_history", []), None
    else:
        output = trainer.train(resume_from_checkpoint=True if resume else None)
        steps_done, log_history = trainer.state.global_step, trainer.state.log_history
        training_loss = output.training_loss
    train_seconds = time.perf_counter() - start
    final = dict(zip(names, trainer.corpus_sampler.probabilities.tolist()))
    losses = [e["loss"] for e in log_history if "loss" in e]

    start = time.perf_counter()
    model = trainer.model
    per_corpus, signatures = {}, {}
    for name in names:
        hypotheses = translate(model, tokenizer, test[name]["source"], batch_size=settings["eval_batch_size"],
                               num_beams=1, max_new_tokens=settings["generation_max_new_tokens"],
                               max_source_length=options.max_length)
        write_hypotheses(run_dir / HYP_DIR, name, hypotheses)
        per_corpus[name], signatures = translation_scores(hypotheses, test[name]["target"],
                                                          bleu_tokenize=args.bleu_tokenize)
    eval_seconds = time.perf_counter() - start
    results = {
        "setup": options.setup,
        "strategy": strategy,
        "seed": seed,
        "corpora": names,
        "test": per_corpus,
        "mean_bleu": macro_average(per_corpus, "bleu"),
        "mean_chrf": macro_average(per_corpus, "chrf"),
        "initial_probabilities": initial,
        "final_probabilities": final,
        "train_seconds": train_seconds + float(previous.get("seconds", 0.0)),
        "eval_seconds": eval_seconds,
        "resumed": resume,
        "steps_done": steps_done,
        "train_loss_first": losses[0] if losses else None,
        "train_loss_last": losses[-1] if losses else None,
        "train_loss_mean": training_loss,
        "parameters": model.num_parameters(),
        "settings": dict(settings),
        "signatures": signatures,
        "machine": machine_info(),
        "finished": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    if previous:
        results["train_seconds_before_resume"] = previous.get("seconds")
        results["resumed_at_step"] = previous.get("step")
    write_json(run_dir / RESULTS_FILE, results)
    if not options.keep_checkpoints:
        for folder in run_dir.glob("checkpoint-*"):
            shutil.rmtree(folder, ignore_errors=True)
        (run_dir / "partial_time.json").unlink(missing_ok=True)
    say(f"{options.setup}/{strategy}/seed{seed}: mean BLEU {results['mean_bleu']:.2f}, "
        f"chrF {results['mean_chrf']:.2f} (train {train_seconds:.0f} s, eval {eval_seconds:.0f} s)")
    return results


def _save_clock_class():
    from transformers import TrainerCallback

    class SaveClock(TrainerCallback):
        """Writes the training seconds so far at every checkpoint, so a resumed run reports its whole wall time."""

        def __init__(self, path: Path, before: float) -> None:
            self.path, self.before, self.start = path, before, time.perf_counter()

        def on_save(self, args, state, control, **kwargs):
            write_json(self.path, {"seconds": self.before + time.perf_counter() - self.start,
                                   "step": state.global_step})

    return SaveClock


def _SaveClock(path: Path, before: float):
    return _save_clock_class()(path, before)


def _progress_callback(label: str, total_steps: int):
    """One short line per logging step (loss, speed) and per balancing update (p), instead of raw log dicts."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def __init__(self) -> None:
            self.start = time.perf_counter()
            self.first_step = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.first_step = time.perf_counter(), state.global_step  # global_step > 0 when resuming

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            probabilities = {k[len("balance/p_"):]: v for k, v in logs.items() if k.startswith("balance/p_")}
            if probabilities:
                p = ", ".join(f"{n} {float(v):.3f}" for n, v in probabilities.items())
                seconds = float(logs.get("balance/seconds", 0))
                say(f"{label}: step {state.global_step} balancing update ({seconds:.1f} s): p = {p}")
            elif "loss" in logs:
                done = max(1, state.global_step - self.first_step)
                rate = (time.perf_counter() - self.start) / done
                say(f"{label}: step {state.global_step}/{total_steps} loss {float(logs['loss']):.3f} "
                    f"({rate:.2f} s/step, ~{fmt_minutes(rate * (total_steps - state.global_step))} of training left)")

    return Progress()


# ---------------------------------------------------------------------------------------------- time estimate


def estimate_seconds(setup_dir: Path, options, meta, settings, strategy: str) -> tuple[float, str]:
    """Wall time of one run: measured from finished runs of the same strategy and preset if any, else a heuristic."""
    finished = [r for r in load_results(setup_dir)
                if r["settings"].get("preset") == settings["preset"]
                and r["settings"].get("max_tokens") == settings["max_tokens"]]
    same = [r for r in finished if r["strategy"] == strategy]
    if same:
        per_step = statistics.fmean(r["train_seconds"] / max(1, r["settings"]["steps"]) for r in same)
        eval_s = statistics.fmean(r["eval_seconds"] for r in same)
        return per_step * settings["steps"] + eval_s + 10, "measured"
    n = len(meta["corpora"])
    step_s = PRESET_STEP_SECONDS.get(settings["preset"], 8.0) * settings["max_tokens"] / 3000
    source = "heuristic"
    static = [r for r in finished if r["strategy"] in STATIC]
    if static:
        step_s = statistics.fmean(r["train_seconds"] / max(1, r["settings"]["steps"]) for r in static)
        source = "measured static steps + heuristic balancing cost"
    updates = settings["steps"] // settings["update_every"]
    token_share = settings["dev_batch_tokens"] / settings["max_tokens"]
    kind = parse_strategy(strategy)["strategy"]
    if kind == "multiuat":
        # Measured on CPU (loop mode): one MC-dropout pass over a dev batch costs ~0.9 of a training step of the same
        # number of tokens (the dev batch is counted in target tokens; sources and the per-position measures add up).
        balancing = updates * n * settings["mc_samples"] * step_s * token_share * 0.9
    elif kind == "multidds-s":
        balancing = updates * n * (n + 1) * step_s * token_share * 0.8  # fwd+bwd per dev and train batch (measured)
    else:
        balancing = 0.0
    decode = PRESET_DECODE_SECONDS.get(settings["preset"], 0.2) * sum(meta["test_sizes"].values())
    if finished:
        decode = statistics.fmean(r["eval_seconds"] for r in finished)
    return settings["steps"] * step_s + balancing + decode + 15, source


def default_estimate(setup: str, seeds: int = 3) -> tuple[dict[str, float], float]:
    """Heuristic time per run of the default grid (nothing prepared yet), and the total over ``seeds`` seeds."""
    options = build_parser().parse_args(["--setup", setup])
    info = SETUPS[setup]
    meta = {"corpora": info["corpora"], "test_sizes": {c: info["eval_sentences"] for c in info["corpora"]}}
    settings = run_settings(options)
    per_run = {s: estimate_seconds(Path("/nonexistent"), options, meta, settings, s)[0] for s in DEFAULT_STRATEGIES}
    return per_run, seeds * sum(per_run.values())


# ---------------------------------------------------------------------------------------------- report


def load_results(setup_dir: Path) -> list[dict]:
    results = []
    for path in sorted(setup_dir.glob(f"*/seed*/{RESULTS_FILE}")):
        data = read_json(path)
        if data is not None:
            data["_dir"] = str(path.parent)
            results.append(data)
    return results


def strategy_label(strategy: str) -> str:
    if strategy.startswith("multiuat-"):
        return f"MultiUAT ({strategy.split('-', 1)[1]})"
    return {"proportional": "proportional (τ=1)", "temperature": "temperature (τ=5)", "uniform": "uniform (τ=∞)",
            "multidds-s": "MultiDDS-S"}.get(strategy, strategy)


def significance(setup_dir: Path, by_run: Mapping[tuple[str, int], dict], baseline: str, corpora: Sequence[str],
                 prepared_test: Mapping[str, Mapping[str, list]], samples: int) -> dict[tuple[str, int], dict]:
    """Paired bootstrap (BLEU, chrF) of every (strategy, seed) against (baseline, same seed), concatenated test."""
    from uat_hf.evaluation import paired_significance, read_hypotheses

    cache_path = setup_dir / SIGNIFICANCE_FILE
    cache = read_json(cache_path, {})
    references = [ref for name in corpora for ref in prepared_test[name]["target"]]
    out: dict[tuple[str, int], dict] = {}
    changed = False

    def hyps(run: Mapping[str, Any]) -> list[str]:
        return [h for name in corpora for h in read_hypotheses(Path(run["_dir"]) / HYP_DIR, name,
                                                                 expected=len(prepared_test[name]["target"]))]

    for (strategy, seed), run in by_run.items():
        if strategy == baseline or (baseline, seed) not in by_run:
            continue
        system, base = hyps(run), hyps(by_run[(baseline, seed)])
        digest = hashlib.sha1(("\n".join(system) + "\0" + "\n".join(base)).encode()).hexdigest()
        key = f"{strategy}|{baseline}|{seed}|{samples}"
        if cache.get(key, {}).get("digest") != digest:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scores, _ = paired_significance(system, base, references, test="bs", n_samples=samples)
            cache[key] = {"digest": digest, **scores}
            changed = True
        out[(strategy, seed)] = cache[key]
    if changed:
        write_json(cache_path, cache)
    return out


def averaged_history(runs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Mean p (and rewards) over seeds at every update step, with the initial p as step 0."""
    from uat_hf.plotting import load_history

    per_step: dict[int, list[dict]] = {}
    for run in runs:
        try:
            history = load_history(run["_dir"])
        except (FileNotFoundError, ValueError):
            continue
        for record in history:
            per_step.setdefault(int(record["step"]), []).append(record)
    if not per_step:
        return []
    first = runs[0]
    names = list(first["initial_probabilities"])
    initial = {n: statistics.fmean(r["initial_probabilities"][n] for r in runs) for n in names}
    records = [{"step": 0, "strategy": None, "probabilities": initial}]
    for step in sorted(per_step):
        group = per_step[step]
        record = {"step": step, "strategy": group[0].get("strategy"), "measure": group[0].get("measure"),
                  "probabilities": {n: statistics.fmean(g["probabilities"][n] for g in group) for n in names}}
        if all("rewards" in g for g in group):
            record["rewards"] = {n: statistics.fmean(g["rewards"][n] for g in group) for n in names}
        records.append(record)
    records[0]["strategy"] = records[-1]["strategy"]
    records[0]["measure"] = records[-1].get("measure")
    return records


def dds_cosine(runs: Sequence[Mapping[str, Any]]):
    from uat_hf.plotting import average_cosine, load_history

    records = []
    for run in runs:
        try:
            records.extend(r for r in load_history(run["_dir"]) if r.get("cosine") is not None)
        except (FileNotFoundError, ValueError):
            continue
    if not records:
        return None, records
    return average_cosine(records), records


def setup_section(
    setup: str, setup_dir: Path, figures_dir: Path, page_dir: Path, samples: int
) -> tuple[list[str], list[dict]]:
    """Markdown for one setup and the machine records of its runs."""
    from uat_hf.plotting import plot_cosine_heatmap, plot_probabilities

    info = SETUPS[setup]
    meta = read_json(setup_dir / PREPARED_DIR / "meta.json")
    plan = read_json(setup_dir / "plan.json", {})
    lines = [f"## {info['title']} (`--setup {setup}`)", ""]
    results = load_results(setup_dir)
    if meta is None:
        per_run, total = default_estimate(setup)
        lines += ["_Not run yet._ " + _how_to_run(setup) + " With the defaults (strategies "
                  + ", ".join(DEFAULT_STRATEGIES) + f"; seeds 1 2 3; preset `small`, {SETUPS[setup]['steps']} steps) "
                  "the script estimates "
                  + ", ".join(f"{strategy_label(k)} {fmt_minutes(v)}" for k, v in per_run.items())
                  + f" per run on 2 quiet CPU cores, {fmt_minutes(total)} in total.", ""]
        return lines, []
    corpora = meta["corpora"]
    strategies = list(plan.get("strategies") or [])
    for r in results:
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])
    seeds = sorted(set(plan.get("seeds") or []) | {r["seed"] for r in results})
    by_run = {(r["strategy"], r["seed"]): r for r in results}
    n_seeds = len(seeds)

    # --- data and settings
    factor = meta["subsample_factor"]
    sample = ("all of each corpus" if factor >= 1
              else f"every corpus subsampled by the same factor {factor:.3g}, so the size ratios and priors are those "
              "of the full data")
    ratio = meta["settings"].get("max_length_ratio")
    cleaning = (f"pairs with a source/target word-count ratio above {ratio} dropped" if ratio else
                "no length-ratio filter (whitespace word counts are meaningless for Japanese/Chinese)")
    lines += [f"Data: `{meta['settings']['data_dir']}` — {len(corpora)} corpora. Training pairs used after cleaning "
              f"(full file in brackets; {sample}; duplicates and empty pairs removed, {cleaning}), test sentences "
              "scored (the first ones of each test split), and the static priors computed from the sizes used:", ""]
    from uat_hf.priors import temperature_prior

    sizes = [meta["train_sizes"][n] for n in corpora]
    priors = {tau: temperature_prior(sizes, tau) for tau in (1.0, 5.0, math.inf)}
    lines += ["| corpus | train pairs | test sentences | p proportional | p τ=5 | p uniform |",
              "|---|---|---|---|---|---|"]
    for i, name in enumerate(corpora):
        lines.append(f"| {name} | {meta['train_sizes'][name]:,} ({meta['full_train_sizes'][name]:,}) | "
                     f"{meta['test_sizes'][name]} | {priors[1.0][i]:.3f} | {priors[5.0][i]:.3f} | "
                     f"{priors[math.inf][i]:.3f} |")
    lines.append("")
    run_settings_seen = {json.dumps(r["settings"], sort_keys=True) for r in results}
    if results:
        s = results[0]["settings"]
        lines += [f"Model: preset `{s['preset']}` ({results[0]['parameters']:,} parameters, joint BPE vocabulary "
                  f"{meta['vocab_size']:,}); {s['steps']} optimizer steps of ≤ {s['max_tokens']:,} tokens "
                  f"(one corpus per batch), Adam (0.9, 0.98), lr {s['learning_rate']:g} with inverse-sqrt schedule "
                  f"and {s['warmup_steps']} warmup steps, label smoothing {s['label_smoothing']}. Balancing update "
                  f"every S = {s['update_every']} steps; MultiUAT K = {s['mc_samples']} MC-dropout passes on a "
                  f"{s['dev_batch_tokens']}-token dev batch per corpus; scorer: Adam lr {s['scorer_lr']:g}, "
                  f"{s['scorer_steps']} steps per update; MultiDDS-S: {s['dds_train_batch_tokens']}-token train and "
                  f"dev batches. Evaluation: {s['decoding']} decoding (≤ {s['generation_max_new_tokens']} new "
                  f"tokens), sacreBLEU `{results[0]['signatures'].get('bleu', '')}`.", ""]
        if len(run_settings_seen) > 1:
            lines += ["**Warning:** the finished runs do not all share the same settings (see each `results.json`); "
                      "their numbers are not comparable.", ""]

    # --- results tables
    lines += [f"Seeds planned: {', '.join(map(str, seeds)) or '—'}. Cells: mean ± sd over the finished seeds; "
              "`(k/n)` = only k of n seeds finished; `—` = not finished yet.", ""]
    static_means = {}
    for strategy in strategies:
        if strategy in STATIC:
            values = [by_run[(strategy, s)]["mean_bleu"] for s in seeds if (strategy, s) in by_run]
            if values:
                static_means[strategy] = statistics.fmean(values)
    baseline = max(static_means, key=static_means.get) if static_means else None
    sig = {}
    if baseline is not None:
        prepared_test = {n: read_json(setup_dir / PREPARED_DIR / "test" / f"{n}.json") for n in corpora}
        sig = significance(setup_dir, by_run, baseline, corpora, prepared_test, samples)

    for metric, label in (("bleu", "BLEU"), ("chrf", "chrF")):
        header = f"| strategy | {' | '.join(corpora)} | **mean {label}** |"
        extra = ""
        if metric == "bleu":
            against = baseline or "best static"
            header += f" Δ mean vs {against} | significant (p<0.05) vs {against} | wall time / run |"
            extra = "---|---|---|"
        lines += [f"**Test {label}** (per corpus and unweighted mean):", "", header,
                  "|---|" + "---|" * (len(corpora) + 1) + extra]
        for strategy in strategies:
            runs = [by_run[(strategy, s)] for s in seeds if (strategy, s) in by_run]
            cells = [fmt_mean_sd([r["test"][c][metric] for r in runs], n_seeds) for c in corpora]
            mean_cell = fmt_mean_sd([r[f"mean_{metric}"] for r in runs], n_seeds)
            row = f"| {strategy_label(strategy)} | {' | '.join(cells)} | **{mean_cell}** |"
            if metric == "bleu":
                row += (f" {_delta_cell(strategy, baseline, by_run, seeds)} | "
                        f"{_sig_cell(strategy, baseline, sig, seeds)} |")
                walls = [r["train_seconds"] + r["eval_seconds"] for r in runs]
                row += f" {fmt_minutes(statistics.fmean(walls)) if walls else '—'} |"
            lines.append(row)
        lines.append("")
    if baseline is not None:
        lines += [f"Significance: sacrebleu paired bootstrap resampling ({samples} resamples, seed 12345), each "
                  f"strategy against the best static prior (**{strategy_label(baseline)}**, highest mean BLEU over "
                  "seeds), seed k against seed k, on the concatenation of all corpora's test outputs (a single "
                  f"corpus-level BLEU over {sum(meta['test_sizes'].values()):,} sentences — a micro average, unlike "
                  "the macro mean in the table). The cell counts the seeds where the difference is significant, "
                  "with its direction; the p-values per seed are in the details below.", ""]
        detail = [f"| {strategy_label(st)} seed {sd} | {v['bleu']['system']:.2f} vs {v['bleu']['baseline']:.2f} | "
                  f"{v['bleu']['p_value']:.3f} | {v['chrf']['system']:.2f} vs {v['chrf']['baseline']:.2f} | "
                  f"{v['chrf']['p_value']:.3f} |" for (st, sd), v in sorted(sig.items())]
        if detail:
            lines += ["<details><summary>Paired tests per seed (concatenated test set)</summary>", "",
                      "| run | BLEU system vs baseline | p | chrF system vs baseline | p |", "|---|---|---|---|---|",
                      *detail, "", "</details>", ""]

    # --- figures and findings
    figure_lines, findings = [], []
    for strategy in strategies:
        if parse_strategy(strategy)["strategy"] not in ("multiuat", "multidds-s"):
            continue
        runs = [by_run[(strategy, s)] for s in seeds if (strategy, s) in by_run]
        if not runs:
            continue
        history = averaged_history(runs)
        if len(history) > 1:
            path = figures_dir / f"{setup}_{strategy}_p.png"
            plot_probabilities(history, path, title=f"{info['title']}: p over training — {strategy_label(strategy)}, "
                                                     f"mean of {len(runs)} seed{'s' if len(runs) > 1 else ''}")
            figure_lines.append(f"![p over training, {strategy_label(strategy)}]({_rel(path, page_dir)})")
        findings.append(_p_finding(strategy, runs, corpora))
        if strategy == "multidds-s":
            cosine, records = dds_cosine(runs)
            if cosine is not None:
                names, matrix, count = cosine
                path = figures_dir / f"{setup}_multidds-s_cosine.png"
                plot_cosine_heatmap(records, path, title=f"{info['title']}: MultiDDS-S gradient cosine, "
                                                         f"mean over {count} updates ({len(runs)} seed(s))")
                figure_lines.append(f"![MultiDDS-S averaged gradient cosine]({_rel(path, page_dir)})")
                findings.append(_dds_finding(names, matrix, runs))
    findings.insert(0, _winner_finding(strategies, by_run, seeds, baseline, sig))
    if figure_lines:
        lines += ["**Sampling probabilities over training** (step 0 = the prior the scorer starts from; mean over "
                  "seeds) and the **MultiDDS-S gradient-cosine matrix** (row j = training corpus, column i = dev "
                  "corpus, averaged over all updates and seeds; a row's mean is the reward of that training "
                  "corpus):", ""]
        lines += [line + "\n" for line in figure_lines]
    lines += ["**What the numbers say** (written by the script from the finished runs):", ""]
    lines += [f"- {f}" for f in findings if f] + [""]
    missing = [f"{s}/seed{k}" for s in strategies for k in seeds if (s, k) not in by_run]
    if missing:
        lines += [f"Runs not finished yet ({len(missing)}): {', '.join(missing)}.", ""]
    return lines, [r["machine"] | {"_wall": r["train_seconds"] + r["eval_seconds"]} for r in results]


def _rel(path: Path, page_dir: Path) -> str:
    return os.path.relpath(path, page_dir).replace(os.sep, "/")


def _how_to_run(setup: str) -> str:
    data = {"multidomain": "../shared/corpora/multidomain-en-de",
            "multilingual": "../shared/corpora/multilingual-ddtp"}[setup]
    return (f"Run `python benchmarks/reproduction.py --data-dir {data} --setup {setup} --out runs/repro "
            "--docs docs/results.md`.")


def _delta_cell(strategy, baseline, by_run, seeds) -> str:
    if baseline is None or strategy == baseline:
        return "(baseline)" if strategy == baseline else "—"
    diffs = [by_run[(strategy, s)]["mean_bleu"] - by_run[(baseline, s)]["mean_bleu"]
             for s in seeds if (strategy, s) in by_run and (baseline, s) in by_run]
    mean, sd = mean_sd(diffs)
    return "—" if mean is None else f"{mean:+.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def _sig_cell(strategy, baseline, sig, seeds) -> str:
    if baseline is None or strategy == baseline:
        return "—"
    tests = [sig[(strategy, s)] for s in seeds if (strategy, s) in sig]
    if not tests:
        return "—"
    better = sum(1 for t in tests if t["bleu"]["p_value"] < 0.05 and t["bleu"]["system"] > t["bleu"]["baseline"])
    worse = sum(1 for t in tests if t["bleu"]["p_value"] < 0.05 and t["bleu"]["system"] < t["bleu"]["baseline"])
    parts = []
    if better:
        parts.append(f"better {better}/{len(tests)}")
    if worse:
        parts.append(f"worse {worse}/{len(tests)}")
    return ", ".join(parts) if parts else f"none of {len(tests)}"


def _winner_finding(strategies, by_run, seeds, baseline, sig) -> str:
    means = {}
    for strategy in strategies:
        values = [by_run[(strategy, s)]["mean_bleu"] for s in seeds if (strategy, s) in by_run]
        if values:
            means[strategy] = statistics.fmean(values)
    if not means:
        return "No run has finished yet."
    best = max(means, key=means.get)
    chrf = {st: statistics.fmean(by_run[(st, s)]["mean_chrf"] for s in seeds if (st, s) in by_run) for st in means}
    best_chrf = max(chrf, key=chrf.get)
    text = (f"Highest mean BLEU: **{strategy_label(best)}** ({means[best]:.2f}; highest mean chrF: "
            f"{strategy_label(best_chrf)}, {chrf[best_chrf]:.2f}); best static prior by BLEU: "
            f"{strategy_label(baseline) if baseline else '—'}" + (f" ({means[baseline]:.2f})." if baseline else "."))
    uat = {s: m for s, m in means.items() if s.startswith("multiuat")}
    if uat and baseline:
        best_uat = max(uat, key=uat.get)
        tests = [sig[(best_uat, s)] for s in seeds if (best_uat, s) in sig]
        n_sig = sum(1 for t in tests if t["bleu"]["p_value"] < 0.05 and t["bleu"]["system"] > t["bleu"]["baseline"])
        n_worse = sum(1 for t in tests if t["bleu"]["p_value"] < 0.05 and t["bleu"]["system"] < t["bleu"]["baseline"])
        delta = uat[best_uat] - means[baseline]
        if delta > 0 and tests and n_sig == len(tests):
            text += (f" The best MultiUAT variant, {strategy_label(best_uat)}, beats it by {delta:+.2f} BLEU, "
                     f"significantly in every seed ({n_sig}/{len(tests)}) — the paper's main claim holds at this "
                     "scale.")
        elif delta > 0:
            text += (f" The best MultiUAT variant, {strategy_label(best_uat)}, is ahead by {delta:+.2f} BLEU on "
                     f"average, but significantly better in only {n_sig} of {len(tests)} seeds"
                     + (f" (and significantly worse in {n_worse})" if n_worse else "")
                     + ": at this scale the paper's gain is not established.")
        elif delta == 0:
            text += (f" The best MultiUAT variant, {strategy_label(best_uat)}, ties with it — the paper's gain does "
                     "not show at this scale.")
        else:
            text += (f" No MultiUAT variant beats it: the best, {strategy_label(best_uat)}, is {-delta:.2f} BLEU "
                     "behind — the paper's gain does not reproduce at this scale (see the caveats on scale).")
    if "multidds-s" in means and uat:
        best_uat = max(uat, key=uat.get)
        diff = uat[best_uat] - means["multidds-s"]
        rel = "above" if diff > 0 else ("level with" if diff == 0 else "below")
        text += f" The best MultiUAT variant is {rel} MultiDDS-S ({uat[best_uat]:.2f} vs {means['multidds-s']:.2f})."
    return text


def _p_finding(strategy: str, runs: Sequence[Mapping[str, Any]], corpora: Sequence[str]) -> str:
    start = np.array([[r["initial_probabilities"][c] for c in corpora] for r in runs]).mean(axis=0)
    end = np.array([[r["final_probabilities"][c] for c in corpora] for r in runs]).mean(axis=0)
    h0, h1 = normalized_entropy(start), normalized_entropy(end)
    uniform = np.full(len(corpora), 1 / len(corpora))
    d0, d1 = np.abs(start - uniform).sum() / 2, np.abs(end - uniform).sum() / 2
    gain = end - start
    up, down = int(np.argmax(gain)), int(np.argmin(gain))
    if abs(h1 - h0) < 0.005 and np.abs(gain).max() < 0.01:
        direction = "p hardly moved from the proportional prior"
    elif d1 < d0:
        direction = "p moved from proportional **toward uniform**"
    else:
        direction = "p moved **away from uniform** (more peaked than proportional)"
    text = (f"{strategy_label(strategy)}: {direction} — normalized entropy H(p)/log N {h0:.3f} → {h1:.3f}, "
            f"total-variation distance to uniform {d0:.3f} → {d1:.3f} (mean of {len(runs)} seed(s)); largest gain "
            f"{corpora[up]} ({start[up]:.3f} → {end[up]:.3f}), largest loss {corpora[down]} ({start[down]:.3f} → "
            f"{end[down]:.3f}).")
    if strategy.startswith("multiuat"):
        target = _last_reward_share(runs, corpora)
        if target is not None:
            text += (" The scorer update pulls p toward R/ΣR, the corpora's shares of the measured uncertainty; at "
                     "the last update these were " + ", ".join(f"{c} {v:.3f}" for c, v in zip(corpora, target))
                     + f" (normalized entropy {normalized_entropy(target):.3f})")
            if normalized_entropy(target) > 0.98:
                text += (": uncertainties of similar size across corpora make a nearly uniform target, whatever the "
                         "corpus sizes — the drift toward uniform comes from that.")
            else:
                top = int(np.argmax(target))
                text += f": the model is most uncertain on {corpora[top]}, which the update favours."
    return text


def _last_reward_share(runs: Sequence[Mapping[str, Any]], corpora: Sequence[str]) -> np.ndarray | None:
    from uat_hf.plotting import load_history

    shares = []
    for run in runs:
        try:
            history = [r for r in load_history(run["_dir"]) if r.get("rewards") and not r.get("skipped")]
        except (FileNotFoundError, ValueError):
            continue
        if history:
            rewards = np.array([history[-1]["rewards"][c] for c in corpora], dtype=np.float64)
            if np.all(rewards > 0) and np.isfinite(rewards).all():
                shares.append(rewards / rewards.sum())
    return np.mean(shares, axis=0) if shares else None


def _dds_finding(names: Sequence[str], matrix: np.ndarray, runs: Sequence[Mapping[str, Any]]) -> str:
    row_mean = matrix.mean(axis=1)
    diag = np.diag(matrix)
    top = int(np.argmax(row_mean))
    self_top = int(np.argmax(diag))
    end = np.array([[r["final_probabilities"][n] for n in names] for r in runs]).mean(axis=0)
    captured = int(np.argmax(end))
    share = float(row_mean[top] / np.abs(row_mean).sum()) if np.abs(row_mean).sum() > 0 else float("nan")
    text = (f"MultiDDS-S cosines: the training corpus with the largest averaged cosine (reward) is **{names[top]}** "
            f"(row mean {row_mean[top]:.3f}, {share:.0%} of the summed |row means|); the most self-similar corpus "
            f"(largest cos(dev_i, train_i)) is {names[self_top]} ({diag[self_top]:.3f}); at the end MultiDDS-S gives "
            f"the largest p to {names[captured]} ({end[captured]:.3f}).")
    if "bible" in names:
        b = list(names).index("bible")
        captured_by_bible = captured == b and end[b] > 1.5 / len(names)
        text += (" As in the paper (where the self-similar Tanzil domain captures MultiDDS-S), the self-similar bible "
                 "domain captures it here." if captured_by_bible else
                 " Unlike the paper's Tanzil observation, bible does not capture MultiDDS-S here "
                 f"(p_bible = {end[b]:.3f}).")
    return text


def write_page(out: Path, docs: Path, samples: int, setups: Iterable[str]) -> None:
    page_dir = docs.parent
    figures_dir = page_dir / "figures"
    lines = [
        "# Reproduction at small scale: MultiUAT vs. static priors and MultiDDS-S",
        "",
        "Generated by `benchmarks/reproduction.py` from the runs under "
        f"`{_display_path(out)}` (last regenerated {_dt.datetime.now().isoformat(timespec='minutes')}); rerun the "
        "script to refresh it — finished runs are skipped, interrupted ones resume from their last checkpoint, and "
        "this page is rebuilt from whatever has finished.",
        "",
        "The question (Wu et al., EMNLP 2021): when one translation model is trained on several corpora, does "
        "learning the corpus sampling distribution p from the model's uncertainty on each corpus's dev set "
        "(MultiUAT) beat fixed temperature priors and the gradient-similarity method MultiDDS-S? Every strategy here "
        "trains the same model from the same initialisation (per seed) for the same number of steps on the same "
        "data; only the corpus mix differs.",
        "",
        "## Scale compared with the paper",
        "",
        _scale_text(out, setups),
        "",
        f"- multi-domain: {PAPER_SCALE['multidomain']};",
        f"- multilingual: {PAPER_SCALE['multilingual']}.",
        "",
        "So the absolute BLEU scores are low, and a strategy's effect can only show through the first few thousand "
        "sentences the model sees: the runs test whether the *direction* of the paper's findings (how p moves, which "
        "strategy helps which corpus) appears early in training, not whether its final numbers reproduce.",
        "",
    ]
    notes = docs.with_name(docs.stem + "_notes.md")
    if notes.is_file():  # hand-written context for the current runs (how and where they ran, what to make of them)
        lines += [notes.read_text(encoding="utf-8").strip(), ""]
    machines: list[dict] = []
    for setup in setups:
        section, machine_records = setup_section(setup, out / setup, figures_dir, page_dir, samples)
        lines += section
        machines += machine_records
    lines += ["## Machine", ""]
    if machines:
        seen: dict[str, list[float]] = {}
        for m in machines:
            seen.setdefault(machine_label(m), []).append(m["_wall"])
        for label, walls in seen.items():
            lines.append(f"- {label} — {len(walls)} run(s), {fmt_minutes(sum(walls))} of wall time in total.")
    else:
        lines.append(f"- No run has finished yet. This page was generated on: {machine_label(machine_info())}.")
    lines += ["", "Each run's `results.json` records its machine, its training and evaluation wall time and every "
              "setting; the sacreBLEU signatures are there too.", ""]
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text("\n".join(lines), encoding="utf-8")
    say(f"wrote {docs}")


def _scale_text(out: Path, setups: Iterable[str]) -> str:
    """What these runs are, from their own results.json (or the defaults when nothing has finished)."""
    parts = []
    for setup in setups:
        results = load_results(out / setup)
        meta = read_json(out / setup / PREPARED_DIR / "meta.json")
        if not results or meta is None:
            continue
        s = results[0]["settings"]
        params = sorted({r["parameters"] for r in results})
        parts.append(
            f"{setup}: preset `{s['preset']}` ({', '.join(f'{p:,}' for p in params)} parameters), "
            f"{s['steps']} steps of ≤ {s['max_tokens']:,} tokens (about {s['steps'] * s['max_tokens'] / 1e6:.1f}M "
            f"padded tokens seen), {sum(meta['train_sizes'].values()):,} training pairs available over "
            f"{len(meta['corpora'])} corpora, {s['steps'] // s['update_every']} balancing updates with "
            f"K = {s['mc_samples']}, {s['decoding']} decoding of {sum(meta['test_sizes'].values()):,} test sentences"
        )
    if not parts:
        parts.append("by default: preset `small` (3+3 layers, d = 256, ~8–10M parameters with the joint vocabulary), "
                     "240 steps of ≤ 3,000 tokens on 2 CPU cores, 6 balancing updates with K = 10, greedy "
                     "decoding of a few hundred test sentences per corpus")
    return ("These runs are **orders of magnitude smaller** than the paper's, on offline stand-in corpora "
            "(Debian/gettext/Bible/dictionary text) — " + "; ".join(parts) + ". The paper:")


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data-dir", help="Directory of NAME.{train,dev,test}.jsonl.gz files.")
    parser.add_argument("--setup", choices=sorted(SETUPS), help="multidomain (en→de domains) or multilingual (X→en).")
    parser.add_argument("--out", default="runs/repro", help="Root of all runs (one folder per setup/strategy/seed).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--strategies", nargs="+", default=list(DEFAULT_STRATEGIES),
                        help="proportional temperature uniform multidds-s multiuat-<measure> ...")
    parser.add_argument("--corpora", nargs="+", help="Corpora (domains or languages) to use; default per setup.")
    parser.add_argument("--steps", type=int,
                        help="Optimizer steps per run (default: 240 for both setups, ~6-8 min per multidomain run "
                        "with the small preset on 2 quiet CPU cores).")
    parser.add_argument("--preset", default="small", help="Model preset of uat_hf.presets (small, tiny, ...).")
    parser.add_argument("--max-train-examples", type=int, default=None,
                        help="Cap on the LARGEST corpus's training pairs; the others are scaled by the same factor "
                             "(size ratios kept). Default: all data (only the one-off preparation gets slower).")
    parser.add_argument("--eval-sentences", type=int,
                        help="Test sentences per corpus (default 200 multidomain, 150 multilingual).")
    parser.add_argument("--vocab-size", type=int,
                        help="Joint BPE vocabulary (default 8000 multidomain, 10000 multilingual).")
    parser.add_argument("--max-length", type=int, default=128, help="Subword truncation of source and target.")
    parser.add_argument("--max-tokens", type=int, default=3000, help="Token budget per training batch.")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, help="Warmup steps (default steps // 6).")
    parser.add_argument("--update-every", type=int,
                        help="S, steps between balancing updates (default: steps // 6, i.e. 6 updates per run).")
    parser.add_argument("--mc-samples", type=int, default=10, help="K, MC-dropout passes (paper: 30).")
    parser.add_argument("--scorer-lr", type=float, default=1e-3,
                        help="Scorer Adam lr (released code: 1e-4 with far more updates).")
    parser.add_argument("--scorer-steps", type=int, default=200)
    parser.add_argument("--dev-batch-tokens", type=int, default=1024)
    parser.add_argument("--max-new-tokens", type=int, default=128, help="Greedy decoding length limit.")
    parser.add_argument("--significance-samples", type=int, default=1000, help="Paired bootstrap resamples.")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's own choice).")
    parser.add_argument("--docs", default="docs/results.md",
                        help="Results page to (re)generate; figures go to <its dir>/figures.")
    parser.add_argument("--save-every", type=int,
                        help="Checkpoint interval in steps, for resuming (default steps // 4).")
    parser.add_argument("--keep-checkpoints", action="store_true", help="Keep checkpoints of finished runs.")
    parser.add_argument("--dry-run", action="store_true",
                        help="Prepare data, print the plan and time estimate, train nothing.")
    parser.add_argument("--report-only", action="store_true", help="Only regenerate the results page from --out.")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    if options.threads:
        import torch

        torch.set_num_threads(options.threads)
    out = Path(options.out)
    docs = Path(options.docs)
    strategies = list(dict.fromkeys(canonical_strategy(s) for s in options.strategies))
    for strategy in strategies:
        parse_strategy(strategy)

    if not options.report_only:
        if not options.setup or not options.data_dir:
            raise SystemExit("--setup and --data-dir are required (or pass --report-only).")
        setup_dir = out / options.setup
        meta = prepare_setup(options, setup_dir)
        plan = read_json(setup_dir / "plan.json", {"strategies": [], "seeds": []})
        plan = {"strategies": list(dict.fromkeys(plan["strategies"] + strategies)),
                "seeds": sorted(set(plan["seeds"]) | set(options.seeds))}
        write_json(setup_dir / "plan.json", plan)
        settings = run_settings(options)
        pending = [(s, k) for s in strategies for k in options.seeds
                   if not (run_dir_of(setup_dir, s, k) / RESULTS_FILE).is_file()]
        skipped = len(strategies) * len(options.seeds) - len(pending)
        estimates = {s: estimate_seconds(setup_dir, options, meta, settings, s) for s in strategies}
        total = sum(estimates[s][0] for s, _ in pending)
        say(f"{options.setup}: {len(pending)} run(s) to do, {skipped} already finished (skipped). Estimated time per "
            "run: " + ", ".join(f"{s} {fmt_minutes(e)}" for s, (e, _) in estimates.items())
            + f" ({'; '.join(sorted({src for _, src in estimates.values()}))}). "
            f"Estimated total: {fmt_minutes(total)} on this machine.")
        for strategy, seed in [(s, k) for s in strategies for k in options.seeds]:
            if (strategy, seed) not in pending:
                say(f"{options.setup}/{strategy}/seed{seed}: finished earlier, skipping")
        if not options.dry_run and pending:
            prepared = load_prepared(setup_dir, meta)
            began = time.perf_counter()
            for index, (strategy, seed) in enumerate(pending, 1):
                run_dir = run_dir_of(setup_dir, strategy, seed)
                existing = read_json(run_dir / RESULTS_FILE)
                if existing is not None:
                    continue
                say(f"run {index}/{len(pending)}")
                train_one(options, setup_dir, meta, prepared, strategy, seed, settings)
                # The page is rebuilt after every run, so an interrupted study still has an up-to-date page.
                write_page(out, docs, options.significance_samples, list(SETUPS))
            say(f"{options.setup}: {len(pending)} run(s) done in {fmt_minutes(time.perf_counter() - began)}")
    write_page(out, docs, options.significance_samples, list(SETUPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
