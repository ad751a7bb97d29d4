"""Translation pairs → prompt + completion examples for a decoder-only (causal) language model.

A causal LM has no encoder: it reads one token sequence and predicts each next token. A translation pair
becomes a *prompt* that names the languages and holds the source sentence, and a *completion*, the target
followed by EOS. The model is trained on the completion only (labels are -100 on the prompt, as TRL's
``completion_only_loss`` does), and at test time it continues the prompt.

The prompt comes from a template per corpus (:class:`CausalPrompt`), so that a one-to-many run tells each
corpus's target language in words: the default reads ``"Translate German to English:\\n{source}\\n"``. For an
instruct model, ``chat=True`` wraps that text as a user turn with ``tokenizer.apply_chat_template`` and the
completion is the assistant's answer.

The example's columns are those of a seq2seq corpus (:mod:`uat_hf.data.preprocessing`), so the sampler, the
token-budget batching (an example's size is ``len(input_ids)``: prompt + completion), the collators and the
rewards read it unchanged: ``input_ids`` (prompt + completion), ``attention_mask``, ``labels`` (same length,
-100 on the prompt) and ``target_text``. The prompt is the prefix whose labels are -100
(:func:`~uat_hf.evaluation.causal_eval.prompt_lengths`); nothing else needs storing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from ..utils.columns import IGNORE_INDEX, REFERENCE_COLUMN
from .corpus_specs import CorpusSpec

__all__ = [
    "DEFAULT_TEMPLATE", "LANGUAGE_NAMES", "PROMPT_FILE", "CausalPrompt", "tokenize_causal_corpus",
]

#: The plain prompt: the languages in words, the source, a newline after which the translation follows.
DEFAULT_TEMPLATE = "Translate {source_language} to {target_language}:\n{source}\n"

#: English names of common ISO 639-1 codes, for the ``{source_language}``/``{target_language}`` fields; another
#: code is written as it is unless :attr:`CausalPrompt.language_names` names it.
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "et": "Estonian",
    "fi": "Finnish", "fr": "French", "gu": "Gujarati", "hi": "Hindi", "is": "Icelandic", "it": "Italian",
    "ja": "Japanese", "kk": "Kazakh", "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian",
    "zh": "Chinese",
}

_FIELDS = ("source", "source_language", "target_language")
#: Where :meth:`CausalPrompt.save_pretrained` writes the prompt, beside the model.
PROMPT_FILE = "translation_prompt.json"


@dataclass
class CausalPrompt:
    """How a corpus's pairs are put to a causal LM.

    Attributes:
        template: ``str.format`` text with ``{source}``, ``{source_language}``, ``{target_language}`` (the
            last two optional), the same for every corpus, or a mapping corpus name → template (corpora it
            does not name use :data:`DEFAULT_TEMPLATE`).
        chat: wrap the formatted prompt as a user message with ``tokenizer.apply_chat_template`` (instruct
            models); the completion is then the assistant's reply.
        language_names: code → name overrides of :data:`LANGUAGE_NAMES`.
    """

    template: str | Mapping[str, str] = DEFAULT_TEMPLATE
    chat: bool = False
    language_names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        templates = self.template.values() if isinstance(self.template, Mapping) else [self.template]
        for template in templates:
            _check_template(template)

    def template_of(self, corpus: str) -> str:
        if isinstance(self.template, Mapping):
            return self.template.get(corpus, DEFAULT_TEMPLATE)
        return self.template

    def language_name(self, code: str) -> str:
        return self.language_names.get(code) or LANGUAGE_NAMES.get(code.split("_")[0].split("-")[0].lower(), code)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write the prompt beside the model (``translation_prompt.json``): ``uat-evaluate`` must ask the
        trained model exactly as it was trained."""
        path = Path(directory) / PROMPT_FILE
        path.write_text(json.dumps({"template": self.template if isinstance(self.template, str)
                                    else dict(self.template), "chat": self.chat,
                                    "language_names": dict(self.language_names)}, indent=2), encoding="utf-8")
        return path

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> CausalPrompt:
        """The prompt saved with a model, or the default one for a model saved without it (a Hub model)."""
        path = Path(directory) / PROMPT_FILE
        if not path.is_file():
            return cls()
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def prompt_text(self, spec: CorpusSpec, source: str) -> str:
        """The formatted prompt of one source sentence of corpus ``spec`` (before any chat template)."""
        return self.template_of(spec.name).format(
            source=source, source_language=self.language_name(spec.source_lang),
            target_language=self.language_name(spec.target_lang),
        )


def tokenize_causal_corpus(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    spec: CorpusSpec,
    prompt: CausalPrompt,
    *,
    max_source_length: int,
    max_target_length: int,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Tokenize a ``source``/``target`` Dataset as prompt + completion for a causal LM (module docstring).

    The source sentence is cut to ``max_source_length`` tokens before it goes into the prompt (so the
    instruction and the newline the model answers after are always whole); the completion is cut to
    ``max_target_length`` tokens, EOS included and kept last. Prompt and completion are tokenized apart and
    joined, so the prompt's tokens are exactly those generation later continues.
    """
    missing = {"source", "target"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"tokenize_causal_corpus needs 'source' and 'target' columns; missing {sorted(missing)}.")
    if tokenizer.eos_token_id is None:
        raise ValueError("A causal LM learns where a translation ends from EOS, but the tokenizer has no eos_token; "
                         "set tokenizer.eos_token.")
    if prompt.chat and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"Corpus {spec.name!r}: chat=True needs a tokenizer with a chat template "
                         "(tokenizer.chat_template is unset); use an instruct model's tokenizer or chat=False.")
    return dataset.map(
        _tokenize_batch,
        batched=True,
        num_proc=num_proc,
        remove_columns=dataset.column_names,
        fn_kwargs={"tokenizer": tokenizer, "spec": spec, "prompt": prompt, "max_source_length": max_source_length,
                   "max_target_length": max_target_length},
        desc=f"{spec.name}: tokenize prompt + completion",
    )




def _check_template(template: str) -> None:
    import string

    names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    unknown = names - set(_FIELDS)
    if "source" not in names or unknown:
        problem = f"unknown field(s) {sorted(unknown)}" if unknown else "no {source} field"
        raise ValueError(f"Prompt template {template!r} has {problem}; it may use {{source}} (required), "
                         "{source_language} and {target_language}.")


def _tokenize_batch(batch: dict, *, tokenizer: PreTrainedTokenizerBase, spec: CorpusSpec, prompt: CausalPrompt,
                    max_source_length: int, max_target_length: int) -> dict[str, list]:
    sources = tokenizer(batch["source"], add_special_tokens=False, max_length=max_source_length, truncation=True)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None and not prompt.chat else []
    input_ids, labels = [], []
    for ids, original, target in zip(sources["input_ids"], batch["source"], batch["target"]):
        source = tokenizer.decode(ids, skip_special_tokens=True) if len(ids) >= max_source_length else original
        text = prompt.prompt_text(spec, source)
        if prompt.chat:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        prompt_ids = bos + tokenizer(text, add_special_tokens=False)["input_ids"]
        completion = tokenizer(target, add_special_tokens=False)["input_ids"][: max_target_length - 1]
        completion = completion + [tokenizer.eos_token_id]
        input_ids.append(prompt_ids + completion)
        labels.append([IGNORE_INDEX] * len(prompt_ids) + completion)
    return {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": labels,
        REFERENCE_COLUMN: batch["target"],
    }
