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

FRAMEWORK = "primus"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
SOURCE = ("Primus experiment YAML (examples/megatron/configs/*.yaml); run: "
          "EXP=this.yaml bash examples/run_pretrain.sh")
USER_MUST_ADD = ["modules.pre_trainer.model: your Primus model file (e.g. llama3.1_8B.yaml)",
                 "data: train_data_path / mock_data, tokenizer_type and tokenizer_model",
                 "train_iters, lr and checkpoint settings"]


def primus_overrides(job: Job) -> dict[str, object]:
    """Override key -> value: Megatron dests, with the booleans Primus' base config turns on written out."""
    overrides = dict(megatron_dests(job))
    c = job.config
    if c.pp > 1 and c.schedule in ("zero-bubble", "zbv"):
        # Primus zero-bubble presets (zb1p: vpp 1; zbv: vpp 2 + V schedule) and their required flags
        overrides.update({"patch_zero_bubble": True, "enable_zero_bubble": True,
                          "zero_bubble_v_schedule": c.schedule == "zbv", "overlap_grad_reduce": False,
                          "overlap_param_gather": False, "gradient_accumulation_fusion": True,
                          "no_persist_layer_norm": True, "create_attention_mask_in_dataloader": False})
        if c.schedule == "zbv":
            overrides["zero_bubble_v_schedule_mem_setup"] = "zb"
        job.warnings.append("Primus zero-bubble needs overlap_grad_reduce and overlap_param_gather off: DP comm is "
                            f"exposed where the projection hides {job.profile.dp_overlap_fraction:.0%} of it")
        job.assumptions[:] = [a for a in job.assumptions if not a.startswith("the DP gradient")]
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
