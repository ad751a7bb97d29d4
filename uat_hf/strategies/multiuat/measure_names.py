"""The names of the uncertainty measures, in a leaf that imports nothing (the measures themselves, in
:mod:`uat_hf.strategies.multiuat.measures`, need torch; the configuration and ``uat-train --help`` need only the
names)."""

from __future__ import annotations

__all__ = ["MEASURES", "RELEASED_CODE_MEASURES"]

#: The paper's six measures, under the names used throughout the library (computed in
#: :mod:`uat_hf.strategies.multiuat.measures`).
MEASURES: tuple[str, ...] = ("pretp", "exptp", "vartp", "comev", "entsent", "enteos")
#: Per-sentence variants as computed by the authors' released fairseq code (see
#: :mod:`uat_hf.strategies.multiuat.measures`).
RELEASED_CODE_MEASURES: tuple[str, ...] = ("exptp_geometric", "vartp_log", "comev_log")
