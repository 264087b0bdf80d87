"""Primus experiment YAML: ``modules.pre_trainer.overrides`` with Megatron-LM dest names (snake_case).

Primus (AMD-AGI/Primus, ``examples/megatron/configs/*.yaml``) runs Megatron-LM's trainer; its
overrides are Megatron argparse dests (``--fp8-format`` -> ``fp8: hybrid``), booleans written
out.  The model YAML (``modules.pre_trainer.model``) names Primus' own model file; the
architecture keys are written as overrides too so the run matches the projection whatever it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tools.exports.common import Job, LaunchConfig, comment_block, launcher_script
from tools.exports.megatron import megatron_dests

FRAMEWORK = "primus"
"""The launch framework this module exports to (tools/exports/__init__.py registers it under this name)."""
SOURCE = ("Primus experiment YAML (examples/megatron/configs/*.yaml); run: "
          "EXP=this.yaml bash examples/run_pretrain.sh")
USER_MUST_ADD = ["data: DATA_PATH in the launcher (train_data_path reads ${PRIMUS_TOKENIZED_DATA_PATH})",
                 "modules.pre_trainer.model where the catalog model has no Primus model file (PRIMUS_MODEL)",
                 "train_iters, lr and checkpoint settings"]
PRIMUS_MODELS = Path(__file__).parents[1] / "launch_options" / "primus_models.txt"


def primus_model_file(model_name: str) -> str | None:
    """The Primus model file of a catalog model (``llama3.1-8b`` -> ``llama3.1_8B.yaml``), None when there is
    none (tools/launch_options/primus_models.txt lists them)."""
    def norm(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    files = [line.strip() for line in PRIMUS_MODELS.read_text().splitlines() if line.strip()
             and not line.startswith("#")]
    want = norm(model_name)
    exact = [f for f in files if norm(f.removesuffix(".yaml")) == want]
    close = sorted((f for f in files if norm(f.removesuffix(".yaml")).startswith(want)), key=len)
    return (exact or close or [None])[0]


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
    overrides["train_data_path"] = "${PRIMUS_TOKENIZED_DATA_PATH:null}"
    model_file = primus_model_file(job.model.name)
    if model_file is None:
        job.warnings.append(f"Primus has no model file for {job.model.name}: set PRIMUS_MODEL to one whose "
                            "architecture matches (the overrides carry the architecture)")
    model = "${PRIMUS_MODEL:" + (model_file or "<primus model file>.yaml").removesuffix(".yaml") + "}.yaml"
    filename = job.stem() + ".primus.yaml"
    overlay = {"work_group": "${TEAM:amd}", "user_name": "${USER:root}", "exp_name": job.stem(),
               "workspace": "./output",
               "modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml", "model": model,
                                           "overrides": overrides}}}
    body = yaml.safe_dump(overlay, sort_keys=False).splitlines()
    head = comment_block(job, SOURCE) + [f"# add: {u}" for u in USER_MUST_ADD]
    launcher = launcher_script(job, SOURCE + "; this launcher runs it from the Primus checkout", [
        "export NNODES NODE_RANK MASTER_ADDR MASTER_PORT", f"export GPUS_PER_NODE={job.procs_per_node}",
        'export PRIMUS_TOKENIZED_DATA_PATH="$DATA_PATH"',
        'HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        f'EXP=${{EXP:-"$HERE/{filename}"}} bash examples/run_pretrain.sh  # from the Primus checkout'],
        placeholders=("DATA_PATH",))
    return LaunchConfig(framework="primus", text="\n".join(head + body) + "\n", options=overrides,
                        warnings=job.warnings, assumptions=job.assumptions, user_must_add=USER_MUST_ADD,
                        command=f"EXP={filename} bash examples/run_pretrain.sh", filename=filename,
                        launcher=launcher, launcher_filename=job.stem() + ".primus.sh")
