"""Plain-text formatting of layouts shared by the tools, the agent's report and the CLI tables."""

from __future__ import annotations

from typing import Any


def layout_text(config: dict[str, Any]) -> str:
    """Compact one-line layout, e.g. 'TP2 PP4 VPP2 EP8 DP8 mbs1 gbs256 s8192 bf16 rc=none SP zero1'."""
    parts = [f"TP{config.get('tp', 1)}", f"PP{config.get('pp', 1)}"]
    if config.get("vpp", 1) > 1:
        parts.append(f"VPP{config['vpp']}")
    first, last = config.get("pp_first_stage_layers"), config.get("pp_last_stage_layers")
    if first is not None or last is not None:      # uneven split: layers on the first/last pipeline rank
        parts[-1] += f"[first {'-' if first is None else first}, last {'-' if last is None else last}]"
    if config.get("pp_layout"):
        parts[-1] += f"[{config['pp_layout']}]"      # Megatron pipeline layout string
    for axis in ("ep", "etp", "cp"):
        if config.get(axis, 1) > 1:
            parts.append(f"{axis.upper()}{config[axis]}")
    if "dp" in config:
        parts.append(f"DP{config['dp']}")
    parts += [f"mbs{config.get('mbs', 1)}", f"gbs{config.get('gbs')}", f"s{config.get('seq_len')}",
              config.get("precision", "bf16"), f"rc={config.get('recompute', 'none')}"]
    if config.get("recompute_num_layers") is not None:
        parts[-1] += f"({config['recompute_num_layers']})"
    modules = tuple(config.get("recompute_modules") or ())
    if config.get("recompute") == "selective" and modules and modules != ("core_attn",):
        parts[-1] += f"[{'+'.join(modules)}]"    # which modules re-run (the default, core_attn, is not spelt out)
    if config.get("sequence_parallel"):
        parts.append("SP")
    if config.get("zero", 0):
        parts.append(f"zero{config['zero']}")
    if config.get("fsdp_size"):
        parts.append(f"fsdp{config['fsdp_size']}")     # HSDP: ZeRO-3 shard group smaller than DP
    if config.get("pp_schedule") not in (None, "1f1b", "interleaved"):
        parts.append(config["pp_schedule"])
    if config.get("moe_dispatcher") not in (None, "alltoall"):
        parts.append(config["moe_dispatcher"])
    overlap = config.get("comm_overlap")
    if overlap is not None:             # stated overlaps (unset: the framework's default ones)
        parts.append(f"overlap={','.join(overlap) or 'none'}")
    if config.get("cuda_graphs"):
        parts.append("cuda-graphs")
    return " ".join(parts)
