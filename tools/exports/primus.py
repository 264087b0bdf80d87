"""Primus experiment YAML: ``modules.pre_trainer.overrides`` with Megatron-LM dest names (snake_case).

Primus (AMD-AGI/Primus, ``examples/megatron/configs/*.yaml``) runs Megatron-LM's trainer; its
overrides are Megatron argparse dests (``--fp8-format`` -> ``fp8: hybrid``), booleans written
out.  The model YAML (``modules.pre_trainer.model``) names Primus' own model file; the
architecture keys are written as overrides too so the run matches the projection whatever it holds.
"""

from __future__ import annotations

import yaml

from tools.exports.common import Job, LaunchConfig, comment_block
from tools.exports.megatron import megatron_dests

SOURCE = ("Primus experiment YAML (examples/megatron/configs/*.yaml); run: "
          "EXP=this.yaml bash examples/run_pretrain.sh")
USER_MUST_ADD = ["modules.pre_trainer.model: your Primus model file (e.g. llama3.1_8B.yaml)",
                 "data: train_data_path / mock_data, tokenizer_type and tokenizer_model",
                 "train_iters, lr and checkpoint settings"]


def primus_overrides(job: Job) -> dict[str, object]:
    """Override key -> value: Megatron dests, with the booleans Primus' base config turns on written out."""
    overrides = dict(megatron_dests(job))
    for key in ("sequence_parallel", "use_distributed_optimizer", "use_torch_fsdp2", "bf16", "fp16",
                "overlap_grad_reduce", "overlap_param_gather"):
        overrides.setdefault(key, False)
    overrides.setdefault("recompute_granularity", None)
    return overrides


def export(job: Job) -> LaunchConfig:
    overrides = primus_overrides(job)
    overlay = {"work_group": "${TEAM:amd}", "user_name": "${USER:root}", "exp_name": job.stem(),
               "workspace": "./output",
               "modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml",
                                           "overrides": overrides}}}
    body = yaml.safe_dump(overlay, sort_keys=False).splitlines()
    head = comment_block(job, SOURCE) + [f"# add: {u}" for u in USER_MUST_ADD]
    return LaunchConfig(framework="primus", text="\n".join(head + body) + "\n", options=overrides,
                        warnings=job.warnings, assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command="EXP=" + job.stem() + ".primus.yaml bash examples/run_pretrain.sh",
                        filename=job.stem() + ".primus.yaml")
