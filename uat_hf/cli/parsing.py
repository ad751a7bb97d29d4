"""One parser for the three tools: ``HfArgumentParser`` over dataclasses, a YAML recipe as defaults.

:class:`UATParser` follows TRL's ``TrlParser``: the dataclasses' fields are the options (HfArgumentParser's
public constructor, one ``--help`` group per dataclass named by its ``_argument_group_name``), ``--config
RECIPE`` loads a recipe (:class:`~uat_hf.cli.recipe.Recipe`: a YAML file, a directory holding ``recipe.yaml``
or a Hub repo id) whose values become the parser's defaults, and the command line wins. Unlike argparse
with plain defaults, every recipe value goes through its option's type: ``update_every: 2.5`` or
``mc_samples: true`` are refused, naming the field and the type, exactly as ``--update_every 2.5`` is.

``uat-train --help`` must not import torch (``UATConfig`` is a ``Seq2SeqTrainingArguments``): the tools
pass a light parser for ``--help`` (here, :class:`~uat_hf.training.balancing_arguments.BalancingArguments` in
place of ``UATConfig``) and build the full one only for ``--help-all`` and for parsing.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

from ..models.presets import MODEL_PRESETS
from .recipe import Recipe
from .strategy_flags import merged_settings, moved_flags, moved_recipe_settings, strategy_flags

__all__ = [
    "CONFIG_FLAG",
    "HELP_ALL_FLAG",
    "UATParser",
    "argument_classes",
    "command_line_level",
    "exit_on_help",
    "merged_settings",
    "make_help_parser",
    "make_parser",
    "portable_paths",
    "recipe_to_dataclasses",
    "strategy_flags",
    "to_plain",
]

CONFIG_FLAG = "--config"
HELP_ALL_FLAG = "--help-all"
_POSITIONAL = "positional"
#: Fields that name a local folder (created if missing): a saved recipe holds them as absolute paths.
LOCAL_PATH_FIELDS = ("output_dir", "logging_dir", "dataset_cache_dir", "preparation_cache_dir")
#: Fields that may name a local file or folder, or something else (a preset, a Hub id, ``bundled:``, ``latest``):
#: absolute in a saved recipe when they name an existing local path.
PATH_FIELDS = ("corpus_dir", "ood_corpus_dir", "model_name_or_path", "tokenizer_name_or_path",
               "resume_from_checkpoint", "deepspeed")
#: The keys of a corpus mapping (corpus_specs, eval_corpus_specs) that may name local files.
SPEC_PATH_KEYS = ("path", "train", "dev", "test")


class UATParser(HfArgumentParser):
    """``HfArgumentParser`` over ``dataclass_types`` with ``--config RECIPE`` and, optionally, one positional
    argument that stands for a field (``uat-evaluate MODEL``, ``uat-plot RUN_DIR``).

    Args:
        dataclass_types: the dataclasses, in the order :meth:`parse` returns them.
        positional: ``(field, metavar)``: a first argument without a flag fills ``field``.
        config_help: ``--config``'s help (``None``: no ``--config``).
        **kwargs: ``argparse.ArgumentParser`` arguments (``prog``, ``usage``, ``description``, ``epilog`` ...).
    """

    def __init__(self, dataclass_types: Iterable[type], *, positional: tuple[str, str] | None = None,
                 config_help: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(list(dataclass_types), **kwargs)
        self.positional_field = positional[0] if positional else None
        if positional:
            self.add_argument(_POSITIONAL, nargs="?", default=None, metavar=positional[1],
                              help=f"the same as --{positional[0]}")
        if config_help is not None:
            self.add_argument(CONFIG_FLAG, default=None, metavar="RECIPE", help=config_help)
        # What an empty command line gives each field (HfArgumentParser's defaults, converted as argparse does).
        self.field_defaults = vars(self.parse_known_args([])[0])

    def field_actions(self) -> dict[str, argparse.Action]:
        """Field name → its option (the positional and ``--config`` excluded)."""
        names = {f.name for dtype in self.dataclass_types for f in fields(dtype) if f.init}
        actions: dict[str, argparse.Action] = {}
        for action in self._actions:  # the field's own option first, not the --no_FIELD of a True boolean
            if action.dest in names:
                actions.setdefault(action.dest, action)
        return actions

    def set_recipe_defaults(self, mapping: Mapping[str, Any], source: str) -> None:
        """Make ``mapping``'s values the defaults, each checked against (and converted by) its option's type.

        Raises ``ValueError`` naming the field, the type it needs and the value given."""
        actions = self.field_actions()
        unknown = [key for key in mapping if key not in actions]
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), actions, n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(f"Unknown field(s) in {source}: {', '.join(hints)}. A recipe is a flat mapping of the "
                             f"fields {self.prog} --help lists.")
        self.set_defaults(**{key: _typed(actions[key], key, value, source) for key, value in mapping.items()})

    def parse(self, argv: Sequence[str] | None = None, *, recipe_fields: Sequence[str] | None = None,
              ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``argv`` → ``(dataclasses, effective)``: the recipe of ``--config`` (only ``recipe_fields`` of it
        when given; a uat-train recipe read by uat-evaluate), then the command line, which wins.

        ``effective`` maps every field the recipe sets, and every other field whose value differs from its
        dataclass default, to its value in plain YAML types: what the run needs to be repeated.
        Argparse errors exit 2 with ``PROG: error: ...``; a bad recipe or a value the dataclass
        refuses raises ``ValueError`` / ``OSError`` for the caller.
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        settings = self._has("strategy_settings")
        argv, dotted = strategy_flags(moved_flags(argv)) if settings else (argv, {})
        config = self._config(argv)
        mapping: dict[str, Any] = {}
        if config:
            recipe = Recipe.from_pretrained(config)
            mapping = recipe.to_dict()
            if recipe_fields is not None:
                mapping = {key: value for key, value in mapping.items() if key in recipe_fields}
            if settings:
                mapping, moved = moved_recipe_settings(mapping, f"recipe {recipe.source or config}")
                dotted = {**moved, **dotted}
            self.set_recipe_defaults(mapping, f"recipe {recipe.source or config}")
        values = vars(self.parse_args(argv))
        values.pop("config", None)
        positional = values.pop(_POSITIONAL, None)
        if positional is not None:
            given = values.get(self.positional_field)
            if given is not None and given != positional:
                raise ValueError(f"{self.positional_field} given twice: {positional!r} first and "
                                 f"--{self.positional_field} {given!r}; give one.")
            values[self.positional_field] = positional
        if dotted:
            values["strategy_settings"] = merged_settings(values.get("strategy_settings"), dotted,
                                                          str(values.get("strategy")))
        outputs = []
        for dtype in self.dataclass_types:
            names = {f.name for f in fields(dtype) if f.init}
            outputs.append(dtype(**{key: value for key, value in values.items() if key in names}))
            if "strategy_settings" in names:  # as the strategy typed them, for the saved recipe
                values["strategy_settings"] = outputs[-1].strategy_settings
        effective = {key: to_plain(value) for key, value in values.items()
                     if key in mapping or not _same(value, self.field_defaults.get(key))}
        return tuple(outputs), effective

    def _has(self, dest: str) -> bool:
        return any(action.dest == dest for action in self._actions)

    def _config(self, argv: Sequence[str]) -> str | None:
        if not any(action.dest == "config" for action in self._actions):
            return None
        pre = argparse.ArgumentParser(prog=self.prog, usage=self.usage, add_help=False, allow_abbrev=False)
        pre.add_argument(CONFIG_FLAG, default=None)
        return pre.parse_known_args(list(argv))[0].config


def argument_classes() -> tuple[type, ...]:
    """The dataclasses ``uat-train`` parses, in order: UATConfig, DataArguments, ModelArguments, RunArguments."""
    from ..training.uat_config import UATConfig  # imports torch: only when parsing for real
    from .arguments import DataArguments, ModelArguments
    from .run_arguments import RunArguments

    return (UATConfig, DataArguments, ModelArguments, RunArguments)


_TRAIN = dict(
    prog="uat-train",
    usage="%(prog)s [--config RECIPE] [--FIELD VALUE ...]   (--help: our fields; --help-all: the Trainer's too)",
    description="Train one translation model on several corpora with corpus balancing (MultiUAT and baselines), "
    "evaluate it per corpus, and save model, tokenizer, scores, test translations and the effective recipe to "
    "output_dir. Values come from the recipe given with --config, then from the command line (which wins).",
    config_help="A recipe: a YAML file, a directory holding recipe.yaml, or a Hub repo id (org/name) with "
    "recipe.yaml.",
)


def make_parser() -> UATParser:
    """The ``uat-train`` parser over :func:`argument_classes` plus ``--config`` (imports torch)."""
    return UATParser(argument_classes(), **_TRAIN)


def make_help_parser() -> UATParser:
    """``uat-train --help``: the balancing, data, model and run fields, without importing torch; one line points
    to ``--help-all`` for the ~150 fields UATConfig inherits from ``Seq2SeqTrainingArguments``."""
    from ..training.balancing_arguments import BalancingArguments
    from .arguments import DataArguments, ModelArguments
    from .run_arguments import RunArguments

    return UATParser(
        (BalancingArguments, DataArguments, ModelArguments, RunArguments), **_TRAIN,
        epilog="Every field of transformers.Seq2SeqTrainingArguments is a uat-train field too (output_dir, max_steps, "
        "learning_rate, seed, eval_strategy, ...): uat-train --help-all lists them all.",
    )


def recipe_to_dataclasses(recipe: Recipe, overrides: Sequence[str] | None = None) -> tuple[Any, ...]:
    """``(UATConfig, DataArguments, ModelArguments, RunArguments)`` from ``recipe``, then ``overrides``
    (command-line style ``["--learning_rate", "1e-3"]``), exactly as ``uat-train`` parses them."""
    parser = make_parser()
    parser.set_recipe_defaults(recipe.to_dict(), f"recipe {recipe.source}" if recipe.source else "recipe")
    arguments, _ = parser.parse(list(overrides or []))
    return arguments


def command_line_level(training_args: Any) -> int:
    """The level of uat-hf's messages in a command: its progress (info) on the main process unless ``--log_level``
    says otherwise, warnings on the other processes (``--log_level_replica``), as Transformers' example scripts
    show theirs. Transformers' own messages keep their verbosity."""
    if training_args.log_level == "passive" and training_args.should_log:
        return logging.INFO
    return training_args.get_process_log_level()


def parse_arguments(argv: Sequence[str] | None = None):
    """``argv`` (with an optional ``--config``) → ``(UATConfig, DataArguments, ModelArguments, RunArguments, recipe)``
    where ``recipe`` is what the run needs to be repeated: the fields that differ from their defaults (recipe
    values plus command-line overrides), local paths made absolute (:func:`portable_paths`).
    ``--help`` lists our fields without importing torch, ``--help-all`` the Trainer's too (both exit)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_help(argv, make_help_parser, make_parser)
    (training, data, model, run_args), effective = make_parser().parse(argv)
    if effective.get("strategy", training.strategy) != training.strategy:  # a variant (multiuat-entsent): save the
        variant = training.strategy_class.variant_field                     # two fields it stands for
        effective.update({"strategy": training.strategy, variant: getattr(training, variant)})
    return training, data, model, run_args, Recipe(portable_paths(effective))


def exit_on_help(argv: Sequence[str], short: Callable[[], argparse.ArgumentParser],
                 full: Callable[[], argparse.ArgumentParser] | None = None) -> None:
    """Print ``short()``'s help for ``-h``/``--help`` (built without torch), or ``full()``'s for ``--help-all``,
    and exit 0; otherwise return."""
    if full is not None and HELP_ALL_FLAG in argv:
        full().print_help()
        sys.exit(0)
    if any(arg in ("-h", "--help") for arg in argv):
        short().print_help()
        sys.exit(0)


def _typed(action: argparse.Action, key: str, value: Any, source: str) -> Any:
    """A recipe value as the command line would parse it; refused when its YAML type cannot be the field's."""
    if value is None or action.type is None:
        return value
    if isinstance(value, (list, tuple)) and action.nargs in ("+", "*"):
        return [_typed_one(action, key, item, source) for item in value]
    if isinstance(value, (dict, list, tuple)):
        if action.type in (int, float, string_to_bool):
            raise ValueError(f"{source}: {key} must be {_type_name(action)}, got {value!r} ({type(value).__name__}).")
        return value  # a field that takes structured YAML (corpus_specs, report_to ...): its dataclass checks it
    return _typed_one(action, key, value, source)


def _typed_one(action: argparse.Action, key: str, value: Any, source: str) -> Any:
    kind = action.type
    is_bool = kind is string_to_bool
    if is_bool != isinstance(value, bool) and not isinstance(value, str):
        raise ValueError(f"{source}: {key} must be {_type_name(action)}, got {value!r} ({type(value).__name__})"
                         + (". YAML reads yes/no/true/false as booleans: quote the value." if isinstance(value, bool)
                            else "."))
    try:
        return kind(value if isinstance(value, str) or is_bool else str(value))
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        raise ValueError(f"{source}: {key} must be {_type_name(action)}, got {value!r} ({type(value).__name__}).")\
            from None


def _type_name(action: argparse.Action) -> str:
    if action.type is string_to_bool:
        return "a bool (true or false)"
    if action.choices:
        return f"one of {[to_plain(choice) for choice in action.choices]}"
    name = getattr(action.type, "__name__", None)
    return {"int": "an integer", "float": "a number", "str": "a string"}.get(name, f"a valid {name} value")


def portable_paths(effective: Mapping[str, Any]) -> dict[str, Any]:
    """``effective`` with its local paths made absolute, so that a saved recipe means the same from any working
    directory: the output folders always, and every other relative path that names an existing file or folder
    (``bundled:`` names, presets, Hub ids and ``latest``, which are no local paths, are kept)."""
    result = dict(effective)
    for key in LOCAL_PATH_FIELDS:
        if isinstance(result.get(key), str):
            result[key] = str(Path(result[key]).expanduser().resolve())
    for key in PATH_FIELDS:
        if key == "model_name_or_path" and result.get(key) in MODEL_PRESETS:
            continue  # a preset, even where a folder of that name exists
        if isinstance(result.get(key), str):
            result[key] = _absolute(result[key])
    for key in ("corpus_specs", "eval_corpus_specs"):
        if isinstance(result.get(key), list):
            result[key] = [{k: _absolute(v) if k in SPEC_PATH_KEYS and isinstance(v, str) else v
                            for k, v in spec.items()} if isinstance(spec, dict) else spec for spec in result[key]]
    return result


def _absolute(value: str) -> str:
    path = Path(value).expanduser()
    if path.is_absolute() or not path.exists():
        return value
    return str(path.resolve())


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or to_plain(a) == to_plain(b)
    except Exception:  # noqa: BLE001 - odd types: treat as changed
        return False


def to_plain(value: Any) -> Any:
    """A value in plain YAML types (enums → their value, tuples → lists, paths → strings)."""
    if isinstance(value, Enum):
        return to_plain(value.value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
