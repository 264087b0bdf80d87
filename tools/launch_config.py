"""Write a layout as a launch config (compatibility module: the exporters live in :mod:`tools.exports`).

Option names are the frameworks' own; ``tools/launch_options/`` lists them with their sources
and the tests check every exported key against those lists, and validate the exports with
the frameworks' own config code (tests/tools/test_export_validation.py).  A layout the
framework cannot launch is refused (:mod:`tools.framework_rules`); what it cannot express
exactly becomes a warning.  :mod:`tools.launch_import` parses the formats back.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from tools.exports import FrameworkRuleError, LaunchConfig, LaunchFramework, export_launch_config
from tools.exports.megatron import MEGATRON_FP8_RECIPE
from tools.exports.torchtitan import TORCHTITAN_SCHEDULE
from tools.framework_rules import FRAMEWORKS

OPTIONS_DIR = Path(__file__).parent / "launch_options"
# Precision -> torchtitan (<= 0.2) converter section and recipe_name, for reading older TOMLs.
TORCHTITAN_QUANT = {"fp8": ("quantize.linear.float8", "tensorwise"),
                    "fp8-blockwise": ("quantize.linear.float8", "rowwise"),
                    "mxfp8": ("quantize.linear.mx", "mxfp8_cublas")}
_LISTS = {"megatron": "megatron_args.txt", "primus": "primus_overrides.txt",
          "megatron-bridge": "bridge_overrides.txt", "maxtext": "maxtext_keys.txt"}


@cache
def known_options(framework: str) -> frozenset[str]:
    """The option names listed for a framework in ``tools/launch_options`` (torchtitan: 'section.key')."""
    if framework == "torchtitan":
        data = json.loads((OPTIONS_DIR / "torchtitan_options.json").read_text())
        return frozenset(f"{section}.{key}" for section, keys in data["sections"].items() for key in keys)
    lines = (OPTIONS_DIR / _LISTS[framework]).read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


__all__ = ["FRAMEWORKS", "MEGATRON_FP8_RECIPE", "OPTIONS_DIR", "TORCHTITAN_QUANT", "TORCHTITAN_SCHEDULE",
           "FrameworkRuleError", "LaunchConfig", "LaunchFramework", "export_launch_config", "known_options"]
