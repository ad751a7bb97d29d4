"""Language-code tokens per corpus for NLLB, M2M100 and mBART-50 models.

These model families do not read a ``>>de<<`` tag in the source text (Marian's convention, see
:func:`uat_hf.data.preprocessing.add_language_tags`). Their tokenizers put a source-language token on the encoder
input (``tokenizer.src_lang``), the target-language token first in the labels (``tokenizer.tgt_lang`` with
``text_target``), and generation must be told which language to produce with ``forced_bos_token_id``. In a
one-to-many run every corpus decodes into another language, so each corpus carries its own pair of codes:

* :func:`corpus_language_codes` — the codes of each corpus from its ``source_lang``/``target_lang``: a
  language given as a code of the scheme is used as it is (``deu_Latn``), else ``overrides`` (``{"pt":
  "por_Latn"}``), else the table of common languages below. A language without a code is refused, naming
  the corpus.
* :func:`check_language_codes` — before any data is read: every code is one token of the tokenizer, and the
  tokenizer places it where generation expects it (the target code first in the labels, as the forced first
  token of a translation).
* :func:`tokenizer_languages` — the context in which a corpus is tokenized (its ``src_lang``/``tgt_lang``).
* :func:`generation_kwargs` — per corpus ``{"forced_bos_token_id": <target code id>}`` for
  :class:`~uat_hf.training.uat_trainer.UATTrainer` (``corpus_generation_kwargs``), whose ``translate`` is the one
  generation path of evaluation. :func:`labels_generation_kwargs` reads the same from a tokenized corpus's
  labels, for a trainer that was given none.
* :func:`language_code_ids` — every language-code token id of a tokenizer: the rewards leave a code that
  opens the labels unscored (:func:`uat_hf.models.targets.scored_mask`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from transformers import PreTrainedTokenizerBase

from ..utils.checkpoints import write_json_atomically
from ..utils.columns import IGNORE_INDEX

logger = logging.getLogger(__name__)


class LanguagePair(Protocol):
    """What the codes are read from: a :class:`~uat_hf.data.corpus_specs.CorpusSpec`, or anything named with a
    language pair (this module sits below the data layer, which imports it)."""

    name: str
    source_lang: str
    target_lang: str

__all__ = [
    "CODE_SCHEMES",
    "CorpusLanguageCodes",
    "check_language_codes",
    "corpus_language_codes",
    "generation_kwargs",
    "GENERATION_KWARGS_FILE",
    "labels_generation_kwargs",
    "language_code_ids",
    "places_language_codes",
    "save_generation_kwargs",
    "tokenizer_languages",
]

#: ``language_tags`` values that use the model's language-code tokens instead of Marian ``>>xx<<`` tags.
CODE_SCHEMES: tuple[str, ...] = ("nllb", "m2m100", "mbart50")

#: Language (ISO 639-1, as corpora and TED/OPUS files name them) → (NLLB FLORES-200 code, mBART-50 code or None).
#: M2M100's code is ``__<language>__`` for every language it covers, so it needs no table.
_TABLE: dict[str, tuple[str, str | None]] = {
    "af": ("afr_Latn", "af_ZA"), "ar": ("arb_Arab", "ar_AR"), "az": ("azj_Latn", "az_AZ"),
    "be": ("bel_Cyrl", None), "bg": ("bul_Cyrl", None), "bn": ("ben_Beng", "bn_IN"), "bs": ("bos_Latn", None),
    "ca": ("cat_Latn", None), "cs": ("ces_Latn", "cs_CZ"), "da": ("dan_Latn", None), "de": ("deu_Latn", "de_DE"),
    "el": ("ell_Grek", None), "en": ("eng_Latn", "en_XX"), "es": ("spa_Latn", "es_XX"), "et": ("est_Latn", "et_EE"),
    "eu": ("eus_Latn", None), "fa": ("pes_Arab", "fa_IR"), "fi": ("fin_Latn", "fi_FI"), "fr": ("fra_Latn", "fr_XX"),
    "ga": ("gle_Latn", None), "gl": ("glg_Latn", "gl_ES"), "gu": ("guj_Gujr", "gu_IN"), "he": ("heb_Hebr", "he_IL"),
    "hi": ("hin_Deva", "hi_IN"), "hr": ("hrv_Latn", "hr_HR"), "hu": ("hun_Latn", None), "hy": ("hye_Armn", None),
    "id": ("ind_Latn", "id_ID"), "is": ("isl_Latn", None), "it": ("ita_Latn", "it_IT"), "ja": ("jpn_Jpan", "ja_XX"),
    "ka": ("kat_Geor", "ka_GE"), "kk": ("kaz_Cyrl", "kk_KZ"), "km": ("khm_Khmr", "km_KH"), "ko": ("kor_Hang", "ko_KR"),
    "lt": ("lit_Latn", "lt_LT"), "lv": ("lvs_Latn", "lv_LV"), "mk": ("mkd_Cyrl", "mk_MK"), "ml": ("mal_Mlym", "ml_IN"),
    "mn": ("khk_Cyrl", "mn_MN"), "mr": ("mar_Deva", "mr_IN"), "ms": ("zsm_Latn", None), "my": ("mya_Mymr", "my_MM"),
    "nb": ("nob_Latn", None), "ne": ("npi_Deva", "ne_NP"), "nl": ("nld_Latn", "nl_XX"), "pl": ("pol_Latn", "pl_PL"),
    "ps": ("pbt_Arab", "ps_AF"), "pt": ("por_Latn", "pt_XX"), "ro": ("ron_Latn", "ro_RO"), "ru": ("rus_Cyrl", "ru_RU"),
    "si": ("sin_Sinh", "si_LK"), "sk": ("slk_Latn", None), "sl": ("slv_Latn", "sl_SI"), "sq": ("als_Latn", None),
    "sr": ("srp_Cyrl", None), "sv": ("swe_Latn", "sv_SE"), "sw": ("swh_Latn", "sw_KE"), "ta": ("tam_Taml", "ta_IN"),
    "te": ("tel_Telu", "te_IN"), "th": ("tha_Thai", "th_TH"), "tl": ("tgl_Latn", "tl_XX"), "tr": ("tur_Latn", "tr_TR"),
    "uk": ("ukr_Cyrl", "uk_UA"), "ur": ("urd_Arab", "ur_PK"), "uz": ("uzn_Latn", None), "vi": ("vie_Latn", "vi_VN"),
    "xh": ("xho_Latn", "xh_ZA"), "zh": ("zho_Hans", "zh_CN"), "zh-tw": ("zho_Hant", None),
}
#: Written beside a saved model: corpus name → its ``generate`` keyword arguments (its forced target code).
GENERATION_KWARGS_FILE = "corpus_generation_kwargs.json"

#: What a code of each scheme looks like: a language given in this form is taken as the code itself.
_CODE_FORMS = {
    "nllb": re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$"),
    "m2m100": re.compile(r"^__[a-z]{2,3}__$"),
    "mbart50": re.compile(r"^[a-z]{2}_[A-Z]{2}$"),
}
_EXAMPLES = {"nllb": "deu_Latn", "m2m100": "__de__", "mbart50": "de_DE"}


@dataclass(frozen=True)
class CorpusLanguageCodes:
    """The language-code tokens of one corpus (``eng_Latn``/``deu_Latn``, ``__en__``/``__de__``, ...)."""

    source: str
    target: str


def corpus_language_codes(
    specs: Sequence[LanguagePair], scheme: str, overrides: Mapping[str, str] | None = None
) -> dict[str, CorpusLanguageCodes]:
    """Corpus name → its source and target code in ``scheme`` (one of :data:`CODE_SCHEMES`).

    ``overrides`` maps a language as the specs spell it (``pt``, ``pt-br``) to its code and wins over the
    table; a language already spelled as a code of the scheme needs neither.
    """
    if scheme not in CODE_SCHEMES:
        raise ValueError(f"Unknown language-code scheme {scheme!r}; choose one of {list(CODE_SCHEMES)}.")
    overrides = dict(overrides or {})
    for language, code in overrides.items():
        if not _CODE_FORMS[scheme].match(str(code)):
            raise ValueError(f"language_codes: {language!r}: {code!r} is not a {scheme} code (like "
                             f"{_EXAMPLES[scheme]!r}).")
    return {spec.name: CorpusLanguageCodes(_code(spec, "source_lang", scheme, overrides),
                                           _code(spec, "target_lang", scheme, overrides))
            for spec in specs}


def _code(spec: LanguagePair, field: str, scheme: str, overrides: Mapping[str, str]) -> str:
    language = getattr(spec, field)
    if _CODE_FORMS[scheme].match(language):
        return language
    if language in overrides:
        return overrides[language]
    key = language.lower().replace("_", "-")
    base = key.split("-")[0]
    if scheme == "m2m100":
        return f"__{base}__"
    entry = _TABLE.get(key) or _TABLE.get(base)
    code = None if entry is None else entry[0 if scheme == "nllb" else 1]
    if code is None:
        raise ValueError(
            f"Corpus {spec.name!r}: {field} {language!r} has no {scheme} language code in uat-hf's table. Give it "
            f"with language_codes: {{{language}: <code>}} (a {scheme} code such as {_EXAMPLES[scheme]!r}), or "
            f"spell {field} as the code itself, or use a model that covers the language."
        )
    return code


def places_language_codes(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer puts language codes itself from ``src_lang``/``tgt_lang`` (NLLB, M2M100, mBART)."""
    return hasattr(tokenizer, "set_src_lang_special_tokens") and hasattr(tokenizer, "src_lang")


def _tokenizer_value(tokenizer: PreTrainedTokenizerBase, code: str) -> str:
    """The ``src_lang``/``tgt_lang`` value that makes ``tokenizer`` emit ``code``: M2M100's tokenizer takes
    ``de`` for the token ``__de__``; NLLB's and mBART-50's take the token itself."""
    if hasattr(tokenizer, "get_lang_token") and _CODE_FORMS["m2m100"].match(code):
        return code[2:-2]
    return code


@contextmanager
def tokenizer_languages(tokenizer: PreTrainedTokenizerBase, codes: CorpusLanguageCodes | None) -> Iterator[None]:
    """Within the block, ``tokenizer`` encodes sources with ``codes.source`` and targets with ``codes.target``;
    its own ``src_lang``/``tgt_lang`` come back afterwards (so that tokenizing one corpus leaves no trace on
    the tokenizer that is saved with the model). ``codes=None`` leaves the tokenizer as it is."""
    if codes is None:
        yield
        return
    saved = (tokenizer.src_lang, tokenizer.tgt_lang)
    tokenizer.src_lang = _tokenizer_value(tokenizer, codes.source)
    tokenizer.tgt_lang = _tokenizer_value(tokenizer, codes.target)
    try:
        yield
    finally:
        tokenizer.tgt_lang = saved[1]
        tokenizer.src_lang = saved[0]


def check_language_codes(tokenizer: PreTrainedTokenizerBase, codes: Mapping[str, CorpusLanguageCodes]) -> None:
    """Refuse, before any data is read, a code the tokenizer cannot use as this library uses it.

    Each code must be one known token; the tokenizer must place the source code in the encoder input and the
    target code first in the labels, because :func:`generation_kwargs` forces that token as the first one
    of every translation (an NLLB tokenizer with ``legacy_behaviour=True`` puts it last, and is refused).
    """
    if codes and not places_language_codes(tokenizer):
        raise ValueError(
            f"Language codes ({sorted({c.target for c in codes.values()})}) are set by the tokenizer's src_lang and "
            f"tgt_lang, but {type(tokenizer).__name__} has none: use the model's own tokenizer (NllbTokenizer, "
            "M2M100Tokenizer, MBart50Tokenizer) or language_tags: marian for a tokenizer of your own."
        )
    for name, pair in codes.items():
        for field, code in (("source", pair.source), ("target", pair.target)):
            if _token_id(tokenizer, code) is None:
                raise ValueError(
                    f"Corpus {name!r}: {field} language code {code!r} is not a single token of "
                    f"{type(tokenizer).__name__}. Check the corpus's {field}_lang, give the code with language_codes: "
                    "{<language>: <code>}, or use the tokenizer of a model that covers the language."
                )
        with tokenizer_languages(tokenizer, pair):
            sample = tokenizer("a", text_target="a")
        source_id, target_id = _token_id(tokenizer, pair.source), _token_id(tokenizer, pair.target)
        if source_id not in sample["input_ids"]:
            raise ValueError(f"Corpus {name!r}: {type(tokenizer).__name__} with src_lang {pair.source!r} does not put "
                             f"the code into the encoder input ({sample['input_ids']}).")
        if sample["labels"][:1] != [target_id]:
            raise ValueError(
                f"Corpus {name!r}: {type(tokenizer).__name__} with tgt_lang {pair.target!r} does not put the code "
                f"first in the labels ({tokenizer.convert_ids_to_tokens(sample['labels'])}), where generation forces "
                "it (forced_bos_token_id). An NLLB tokenizer needs legacy_behaviour=False (the default)."
            )


def generation_kwargs(
    tokenizer: PreTrainedTokenizerBase, codes: Mapping[str, CorpusLanguageCodes]
) -> dict[str, dict[str, Any]]:
    """Corpus name → ``{"forced_bos_token_id": id of its target code}``, for
    ``UATTrainer(corpus_generation_kwargs=...)``."""
    return {name: {"forced_bos_token_id": _token_id(tokenizer, pair.target)} for name, pair in codes.items()}


def language_code_ids(tokenizer: PreTrainedTokenizerBase | None) -> frozenset[int]:
    """The ids of every language-code token of ``tokenizer`` (``deu_Latn``, ``__de__``, ``de_DE``; its special
    tokens in one of the three schemes' forms, and M2M100's language tokens, which it keeps apart), or an empty
    set for a tokenizer that does not place language codes (:func:`places_language_codes`) or ``None``."""
    if tokenizer is None or not places_language_codes(tokenizer):
        return frozenset()
    candidates = [*tokenizer.all_special_tokens, *getattr(tokenizer, "lang_token_to_id", {})]
    ids = (_token_id(tokenizer, token) for token in candidates
           if any(form.match(str(token)) for form in _CODE_FORMS.values()))
    return frozenset(i for i in ids if i is not None)


def labels_generation_kwargs(
    tokenizer: PreTrainedTokenizerBase | None, labels: Sequence[Sequence[int]] | None, corpus: str
) -> dict[str, Any]:
    """``{"forced_bos_token_id": id}`` when every row of ``labels`` (a tokenized corpus's label column) opens
    with the same language code of ``tokenizer``: the language the corpus's references are in, read from the
    data itself, so it holds whatever codes were used to tokenize it. ``{}`` for a tokenizer without language
    codes; ``{}`` and a warning naming ``corpus`` when the tokenizer has codes but the labels do not show one
    (no labels, or rows opening with different tokens): generation would then force no target language."""
    codes = language_code_ids(tokenizer)
    if not codes:
        return {}
    firsts = {next((int(t) for t in row if t != IGNORE_INDEX), None) for row in labels or ()}
    if len(firsts) == 1 and next(iter(firsts)) in codes:
        return {"forced_bos_token_id": next(iter(firsts))}
    shown = "it has no labels" if not firsts else (
        f"its labels open with {sorted(tokenizer.convert_ids_to_tokens([t for t in firsts if t is not None]))[:5]}")
    logger.warning(
        "Corpus %r: %s places language codes, but %s, not one target-language code, so generation forces no "
        "target language for it and may translate into another language. Pass corpus_generation_kwargs={%r: "
        "{'forced_bos_token_id': <id of its target code>}} (uat_hf.data.language_codes.generation_kwargs "
        "builds them).",
        corpus, type(tokenizer).__name__, shown, corpus)
    return {}


def save_generation_kwargs(kwargs: Mapping[str, Mapping[str, Any]], folder: str) -> None:
    """Write each corpus's generate kwargs to ``folder/corpus_generation_kwargs.json``, beside the model.

    Why a file of its own: a one-to-many model translates into a different language per corpus, and its
    ``generation_config`` holds one ``forced_bos_token_id`` only. A value JSON cannot hold (an object) is left
    out. Read it back with ``model.generate(**inputs, **json.load(f)[corpus])``."""
    kept = {name: {key: value for key, value in values.items() if _jsonable(value)} for name, values in kwargs.items()}
    os.makedirs(folder, exist_ok=True)
    write_json_atomically(os.path.join(folder, GENERATION_KWARGS_FILE), kept)  # never torn by a kill mid-save


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int | None:
    """The id of ``token`` when it is one known token of the tokenizer, else ``None``."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        return None
    return token_id if tokenizer.convert_ids_to_tokens(token_id) == token else None
