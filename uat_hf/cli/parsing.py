"""Parsing the command line and recipes of the uat-hf tools into their argument dataclasses.

``uat-train`` parses ``UATConfig`` with :class:`~uat_hf.cli.arguments.DataArguments`,
:class:`~uat_hf.cli.arguments.ModelArguments` and :class:`~uat_hf.cli.arguments.RunArguments` with one
``HfArgumentParser``; a recipe (``--config``) supplies defaults and the command line wins.

:class:`GroupedArgumentParser` is that ``HfArgumentParser`` with the ``--help`` groups chosen by the
caller: ``UATConfig``'s own balancing fields come first and the ~120 fields it inherits from
``Seq2SeqTrainingArguments`` last, so ``uat-train --help`` shows the project's flags before the
Trainer's. The values are parsed exactly as ``HfArgumentParser`` parses them (same options, types and
defaults; ``parse_args_into_dataclasses`` still builds the same dataclasses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any, get_type_hints

from transformers import HfArgumentParser

from ..recipe import Recipe

__all__ = [
    "CONFIG_FLAG",
    "GroupedArgumentParser",
    "argument_classes",
    "argument_groups",
    "check_recipe_keys",
    "field_names",
    "make_parser",
    "parse_recipe_and_args",
    "recipe_to_dataclasses",
    "to_plain",
]

CONFIG_FLAG = "--config"
BALANCING_GROUP = "balancing (uat_hf.UATConfig)"
TRAINING_GROUP = "training (transformers.Seq2SeqTrainingArguments)"


class GroupedArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` whose ``--help`` groups are ``groups``: ``(title, field names)`` in display order.

    Every init field of every dataclass must be in exactly one group. Options, types, defaults and
    ``parse_args_into_dataclasses`` are those of ``HfArgumentParser`` (each field goes through its
    ``_parse_dataclass_field``); only the group an option is listed under, and the order, change.
    """

    def __init__(self, dataclass_types: Iterable[type], groups: Sequence[tuple[str, Sequence[str]]], **kwargs: Any):
        super().__init__(None, **kwargs)
        self.dataclass_types = list(dataclass_types)
        by_name: dict[str, dataclasses.Field] = {}
        for dtype in self.dataclass_types:
            hints = get_type_hints(dtype)
            for f in fields(dtype):
                if f.init:
                    f.type = hints[f.name]  # as HfArgumentParser._add_dataclass_arguments does
                    by_name[f.name] = f
        for title, names in groups:
            group = self.add_argument_group(title)
            for name in names:
                if name not in by_name:
                    raise ValueError(f"argument group {title!r}: {name!r} is no field of {self.dataclass_types} "
                                     "(or is listed twice).")
                self._parse_dataclass_field(group, by_name.pop(name))
        if by_name:
            raise ValueError(f"fields {sorted(by_name)} are in no argument group.")


def argument_classes() -> tuple[type, ...]:
    """The dataclasses a recipe fills, in order: UATConfig, DataArguments, ModelArguments, RunArguments."""
    from ..uat_config import UATConfig
    from .arguments import DataArguments, ModelArguments, RunArguments

    return (UATConfig, DataArguments, ModelArguments, RunArguments)


def argument_groups() -> list[tuple[str, list[str]]]:
    """``uat-train --help`` groups: balancing (UATConfig's own fields), data, model, run, then training
    (the fields UATConfig inherits from ``Seq2SeqTrainingArguments``)."""
    from transformers import Seq2SeqTrainingArguments

    uat_config, *others = argument_classes()
    inherited = {f.name for f in fields(Seq2SeqTrainingArguments)}
    own = [f.name for f in fields(uat_config) if f.init]
    groups = [(BALANCING_GROUP, [name for name in own if name not in inherited])]
    groups += [(dtype._argument_group_name, [f.name for f in fields(dtype) if f.init]) for dtype in others]
    groups.append((TRAINING_GROUP, [name for name in own if name in inherited]))
    return groups


def make_parser(prog: str | None = "uat-train") -> GroupedArgumentParser:
    """The ``uat-train`` parser over ``(UATConfig, DataArguments, ModelArguments, RunArguments)`` plus ``--config``."""
    parser = GroupedArgumentParser(
        argument_classes(),
        argument_groups(),
        prog=prog,
        usage="%(prog)s [--config RECIPE] [--FIELD VALUE ...]   (uat-train --help lists every field)",
        description="Train one translation model on several corpora with corpus balancing (MultiUAT and baselines), "
        "evaluate it per corpus, and save model, tokenizer, scores and the effective recipe to output_dir. "
        "The project's own fields come first (balancing, data, model, run), the Trainer's inherited ones last.",
        epilog="Values come from the recipe given with --config, then from the command line (which wins).",
    )
    parser.add_argument(
        CONFIG_FLAG,
        default=None,
        help="A recipe: a YAML file, a directory holding recipe.yaml, or a Hub repo id (org/name) with recipe.yaml.",
    )
    return parser


def field_names() -> dict[str, str]:
    """Every recipe field → the dataclass that owns it."""
    owners = {}
    for dtype in argument_classes():
        for f in fields(dtype):
            if f.init:
                owners[f.name] = dtype.__name__
    return owners


def check_recipe_keys(mapping: dict[str, Any], source: str = "recipe") -> None:
    """Raise ``ValueError`` naming every key that is no field of the three dataclasses."""
    import difflib

    known = field_names()
    unknown = [key for key in mapping if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), known, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(
            f"Unknown field(s) in {source}: {', '.join(hints)}. A recipe is a flat mapping of UATConfig, "
            "DataArguments, ModelArguments and RunArguments fields (see uat-train --help)."
        )


def parse_recipe_and_args(mapping: dict[str, Any] | None = None, argv: list[str] | None = None, *,
                          source: str = "recipe"):
    """Recipe values, then command-line overrides → ``(UATConfig, DataArguments, ModelArguments, RunArguments,
    effective)``.

    The recipe's values become the parser's defaults, so the command line beats them and string values
    in the recipe (e.g. ``1e-3``, which YAML reads as a string) are converted exactly like command-line
    values. ``effective`` is the flat mapping of what was set (recipe keys plus fields that differ from
    the defaults), in plain YAML types: the recipe this run actually used. ``--config`` in ``argv`` is
    ignored here (the caller loads it into ``mapping``).
    """
    mapping = dict(mapping or {})
    check_recipe_keys(mapping, source)
    parser = make_parser()
    base_defaults = {action.dest: action.default for action in parser._actions}
    parser.set_defaults(**mapping)
    namespace, remaining = parser.parse_known_args(args=[] if argv is None else list(argv))
    if remaining:
        raise ValueError(f"Unrecognised command-line arguments: {remaining} (see uat-train --help).")
    values = vars(namespace)
    values.pop("config", None)
    outputs = []
    for dtype in argument_classes():
        keys = {f.name for f in fields(dtype) if f.init}
        outputs.append(dtype(**{k: v for k, v in values.items() if k in keys}))
    effective = {
        key: to_plain(value)
        for key, value in values.items()
        if key in mapping or not _same(value, base_defaults.get(key))
    }
    return (*outputs, effective)


def recipe_to_dataclasses(recipe: Recipe, overrides: Sequence[str] | None = None):
    """``(UATConfig, DataArguments, ModelArguments, RunArguments)`` from ``recipe``, then ``overrides``
    (command-line style ``["--learning_rate", "1e-3"]``), exactly as ``uat-train`` parses them."""
    *arguments, _ = parse_recipe_and_args(recipe.to_dict(), list(overrides or []), source=recipe.source or "recipe")
    return tuple(arguments)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or to_plain(a) == to_plain(b)
    except Exception:  # noqa: BLE001 - odd types: treat as changed
        return False


def to_plain(value: Any) -> Any:
    """A value in plain YAML types (enums → their value, tuples → lists, paths → strings)."""
    from enum import Enum

    if isinstance(value, Enum):
        return to_plain(value.value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
