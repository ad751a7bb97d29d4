"""``uat-train``'s data preparation, kept between runs: a second run of the same recipe reads the tokenizer and the
tokenized corpora the first one prepared (:mod:`uat_hf.data.preparation_cache`) instead of preparing them again.

The key covers every data field except those that only say how or where to prepare (``preprocessing_num_workers``,
``dataset_cache_dir``, ``preparation_cache``, ``preparation_cache_dir``) or what a run does with the prepared
corpora (``corpus_audit``), the corpus specs with their local files' sizes and modification times, the tokenizer
(the fields of a trained one; the saved files of a loaded one), the language tags and whether the model reads
prompts. The corpus audit is kept in the same folder, one report per seed. Under several processes the main process
of each machine prepares first and the others read its result.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ..data.audit import SAMPLE as AUDIT_SAMPLE
from ..data.audit.report_file import load_report, report_name, save_report
from ..data.corpora import clean_corpora
from ..data.corpus_specs import CorpusSpec
from ..data.preparation_cache import (
    PreparedData,
    cache_root,
    load_prepared,
    preparation_key,
    save_prepared,
    spec_fingerprint,
)
from .arguments import DataArguments, ModelArguments
from .audit import run_audit
from .run_tokenizer import build_tokenizer
from .train_data import load_data, preprocessing_for, streams

logger = logging.getLogger(__name__)

__all__ = ["HOW_TO_PREPARE_FIELDS", "TRAINED_TOKENIZER_FIELDS", "prepare_data", "preparation_inputs"]

#: Data fields that change how or where the data is prepared, not what it is, or only what a run does with it
#: afterwards (``corpus_audit``: the prepared corpora are the cleaned ones; a run drops pairs from them): left out
#: of the key.
HOW_TO_PREPARE_FIELDS = ("preprocessing_num_workers", "dataset_cache_dir", "preparation_cache",
                         "preparation_cache_dir", "corpus_audit")
#: Model fields a trained joint tokenizer depends on.
TRAINED_TOKENIZER_FIELDS = ("model_name_or_path", "vocab_size", "tokenizer_model", "tokenizer_min_frequency",
                            "tokenizer_max_sentences", "tokenizer_train_examples", "lowercase")


def prepare_data(training_args, data_args: DataArguments, model_args: ModelArguments, specs: list[CorpusSpec],
                 eval_specs: list[CorpusSpec], tags: list[str], tag_of: dict, eval_tag_of: dict, prompt=None,
                 resume_from: str | None = None):
    """``(tokenizer, train, dev, eval_corpora, out_of_domain_names, audit)``, read from the preparation cache when a
    run with the same key saved them, else prepared (:func:`~uat_hf.cli.run_tokenizer.build_tokenizer`,
    :func:`~uat_hf.cli.train_data.load_data`) and saved. A run resumed from checkpoint ``resume_from`` uses the
    tokenizer saved there, never a newly trained one.

    ``audit``: the corpus audit (:func:`~uat_hf.cli.audit.run_audit`; ``None`` when ``corpus_audit`` is off). It
    looks at the training and dev pairs the preparation cleans, before the tokenizer is trained, so that each
    corpus is read and cleaned once; the cache keeps it beside the data it describes, one report per seed."""
    start = time.monotonic()
    loads_tokenizer = (resume_from is not None or model_args.tokenizer_name_or_path is not None
                       or not model_args.is_preset)
    tokenizer = build_tokenizer(model_args, specs, tags, data_args, resume_from) if loads_tokenizer else None
    audit_name = report_name(training_args.seed, AUDIT_SAMPLE, data_args.corpus_audit == "drop")

    def prepare():
        nonlocal tokenizer
        cleaned = None
        if data_args.corpus_audit != "off":  # the pairs the audit reads are the ones tokenized below
            cleaned = clean_corpora([spec for spec in specs if not streams(spec, data_args)],
                                    preprocessing_for(data_args), splits=("train", "dev"),
                                    num_proc=data_args.preprocessing_num_workers,
                                    cache_dir=data_args.dataset_cache_dir)
        audit = run_audit(data_args, specs, seed=training_args.seed, cleaned=cleaned)
        if tokenizer is None:
            tokenizer = build_tokenizer(model_args, specs, tags, data_args)
        return (tokenizer, *load_data(data_args, specs, eval_specs, tokenizer, tag_of, eval_tag_of, prompt, cleaned),
                audit)

    if not data_args.preparation_cache:
        return prepare()
    inputs, reason = preparation_inputs(data_args, model_args, specs, eval_specs, tags, prompt, tokenizer)
    if inputs is None:
        logger.info(f"preparation cache not used: {reason}; the data is prepared anew on every run")
        return prepare()
    folder = cache_root(data_args.preparation_cache_dir, data_args.dataset_cache_dir) / preparation_key(inputs)
    waiting = training_args.main_process_first(desc="preparing the data") if training_args.world_size > 1 \
        else contextlib.nullcontext()
    with waiting:
        cached = load_prepared(folder)
        if cached is not None:
            logger.info(f"prepared data read from the preparation cache {folder} in {time.monotonic() - start:.1f}s "
                        "(a run with the same data fields, corpus files and tokenizer saved it)")
            audit = None
            if data_args.corpus_audit != "off":
                kept = load_report(folder, audit_name)
                audit = run_audit(data_args, specs, seed=training_args.seed, kept=kept)
                if kept is None and training_args.should_save:
                    save_report(folder, audit_name, audit)
            parts = cached.parts
            return (tokenizer or cached.tokenizer, parts["train"], parts["dev"], parts["eval"],
                    cached.extra["out_of_domain"], audit)
        tokenizer, train, dev, eval_corpora, ood, audit = prepare()
        save_start = time.monotonic()
        save_prepared(folder, PreparedData(tokenizer, {"train": train, "dev": dev, "eval": eval_corpora},
                                           {"out_of_domain": ood}), inputs)
        if audit is not None:
            save_report(folder, audit_name, audit)
        logger.info(f"prepared data saved to the preparation cache {folder} in {time.monotonic() - save_start:.0f}s; "
                    "a run with the same data fields, corpus files and tokenizer reads it from there")
    return tokenizer, train, dev, eval_corpora, ood, audit


def preparation_inputs(data_args: DataArguments, model_args: ModelArguments, specs: list[CorpusSpec],
                       eval_specs: list[CorpusSpec], tags: list[str], prompt=None, tokenizer=None
                       ) -> tuple[dict | None, str | None]:
    """``(inputs, None)``: what the prepared data depends on, to be hashed into its key; or ``(None, reason)`` when
    some corpus cannot be fingerprinted. ``tokenizer``: the one loaded by name (its saved files count), ``None``
    for one trained on the corpora (its fields count)."""
    if any(streams(spec, data_args) for spec in specs):
        return None, "streamed corpora are read as they train"
    fingerprints = {}
    for group, group_specs in (("specs", specs), ("eval_specs", eval_specs)):
        fingerprints[group] = []
        for spec in group_specs:
            fingerprint, reason = spec_fingerprint(spec)
            if fingerprint is None:
                return None, reason
            fingerprints[group].append(fingerprint)
    data = {key: value for key, value in asdict(data_args).items() if key not in HOW_TO_PREPARE_FIELDS}
    if tokenizer is None:
        tokenizer_inputs = {"trained": {key: getattr(model_args, key) for key in TRAINED_TOKENIZER_FIELDS}}
    else:
        tokenizer_inputs = {"loaded": _saved_files_hash(tokenizer)}
    return {"data": data, **fingerprints, "tokenizer": tokenizer_inputs, "tags": list(tags),
            "prompt": prompt is not None}, None


def _saved_files_hash(tokenizer) -> str:
    """A hash of the files ``tokenizer.save_pretrained`` writes: two tokenizers that save alike tokenize alike."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer.save_pretrained(folder)
        for file in sorted(Path(folder).rglob("*")):
            if file.is_file():
                digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()
