"""Launch configs from one layout + model + cluster, one module per framework.

:func:`export_launch_config` refuses a layout the framework cannot launch
(:mod:`tools.framework_rules`), so nothing is exported as if it ran where it does not.
Modules: :mod:`~tools.exports.megatron` (Megatron-LM command line),
:mod:`~tools.exports.megatron_bridge` (dotted recipe overrides), :mod:`~tools.exports.primus`
(experiment YAML), :mod:`~tools.exports.torchtitan` (TOML + 0.3.0 command line),
:mod:`~tools.exports.maxtext` (YAML).
"""

from __future__ import annotations

from projection.errors import ProjtuneError
from projection.model_spec import ModelSpec
from projection.training_config import Cluster, TrainingConfig
from tools.exports.common import Job, LaunchConfig, LaunchFramework
from tools.framework_rules import FRAMEWORKS, check_framework, framework_violations, legal_frameworks


class FrameworkRuleError(ProjtuneError):
    """The layout breaks a rule of the target framework."""


def export_launch_config(model: ModelSpec, cluster: Cluster, config: TrainingConfig,
                         framework: LaunchFramework | str) -> LaunchConfig:
    """Write one layout for ``framework``.

    Raises:
        FrameworkRuleError: the framework cannot launch the layout (the message names the rules
            and the frameworks that can).
    """
    name = check_framework(framework)
    reasons = framework_violations(name, model, cluster, config)
    if reasons:
        others = [f for f in legal_frameworks(model, cluster, config) if f != name]
        can = f"; frameworks that can: {', '.join(others)}" if others else "; no framework here can launch it"
        raise FrameworkRuleError(f"{name} cannot launch this layout: {'; '.join(reasons)}{can}")
    from tools.exports import maxtext, megatron, megatron_bridge, primus, torchtitan

    exporters = {module.FRAMEWORK: module for module in (megatron, megatron_bridge, primus, torchtitan, maxtext)}
    return exporters[name].export(Job(model, cluster, config))


__all__ = ["FRAMEWORKS", "FrameworkRuleError", "LaunchConfig", "LaunchFramework", "export_launch_config"]
