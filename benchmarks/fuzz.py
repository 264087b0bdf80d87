"""On-demand fuzzing of every input door: CLI flags, requests, sweep YAML, HF configs and tool arguments.

Usage: python benchmarks/fuzz.py [--inputs 10000] [--seed 0] [--hang-s 10] [--only requests,...] [--worst]

Runs ``--inputs`` generated inputs (seeded ``random``, so a run is reproducible), split over the
five targets, in-process (the CLI through typer's runner), and prints per target and in total:

- ``tracebacks``: an exception escaped (anything but a structured error / clarification / exit 0-2);
- ``hangs``: one input ran longer than ``--hang-s`` seconds (a SIGALRM timer stops it);
- ``non_finite``: a result or ``--json`` output held NaN/Infinity (or was not strict JSON);
- ``leaks``: a secret file's content appeared in an answer (profile/model paths given remotely).

Acceptance (issue 13): every count 0 over >= 10,000 inputs.  Tool calls run the way the MCP
server runs them (``untrusted=True``; ``search``/``tune`` with the server's deadline, whose
cancellation is a structured error and counts as handled).  Independent of the ``projtune``
console script: it imports the packages directly.  The first failures are printed with the input.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.json_out import non_finite_paths, strict_loads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SECRET = "s3cr3t-fuzz-canary-7f1c"
JUNK: list[Any] = [0, -1, 1, 2, 3, 7, 8, 64, 1000, 2**31, 2**63, 10**30, -(2**40), 0.5, 1.5, -0.0, 1e308, 1e-308,
                   float("inf"), float("-inf"), float("nan"), "", "x", "8", "1e9", "nan", "llama3-8b", None, True,
                   False, [], [1, 2], {}, {"a": 1}, "a" * 5000, "../../etc/passwd"]


class Hang(BaseException):
    """Raised by the alarm when one input runs too long (a BaseException: no broad except swallows it)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise Hang()


non_finite = non_finite_paths       # tools/json_out.py: one definition for the tests, the fuzz script and the CLI
strict_json = strict_loads


# ---------------------------------------------------------------- generators


def _number_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return str(rng.choice([0, 1, 2, 4, 8, 16, 64, 128, 256, 512, 1024, 2048, 16384, 131072, 131073]))
    if kind < 0.7:
        return str(rng.randint(0, 10 ** rng.randint(1, 14)))
    if kind < 0.85:
        return f"{rng.uniform(0, 100):.{rng.randint(0, 3)}f}{rng.choice(['k', 'K', 'M', 'm', ''])}"
    return rng.choice(["-8", "1e5", "0x10", "8.", ".5", "1,024", "½", "٣"])


def gen_request(rng: random.Random) -> str:
    """Free text mixing catalog names, numbers, keywords and junk."""
    from agent.text.names import gpu_index, model_index

    words = [*rng.sample(sorted(model_index()), 3), *rng.sample(sorted(gpu_index()), 3),
             "llama", "70b", "8x7b", "Mistral 7B", "qwen2", "gemma", "phi3", "gpt5", "tpu-v5", "./cfg/config.json",
             "/etc/passwd.json", "tune", "on", "for", "with", "x", "gpus", "nodes", "per node", "gpus per node",
             "seq", "seq_len", "context", "gbs", "global batch", "batch size", "tokens per step", "tokens", "top",
             "tp<=", "pp in 1,2", "ep=", "no fp8", "use fp8", "fp4", "nvfp4", "mxfp8", "bf16 only", "fp16", "lora",
             "SFT", "headroom", "%", "must fit with", "NVL72", "NICs", "400G", "Gb/s", "torchtitan", "megatron",
             ",", ";", ".", "\n", "\t", "   ", "🙂", "\x00", "ß", "×"]
    parts = []
    for _ in range(rng.randint(0, 30)):
        parts.append(_number_text(rng) if rng.random() < 0.3 else rng.choice(words))
    text = rng.choice([" ", "", ", "]).join(parts)
    if rng.random() < 0.1:
        text = rng.choice(["1", " ", "a-", "8x", "seq ", "1.", "llama ", "tp in 1,"]) * rng.randint(100, 3000)
    if rng.random() < 0.05:
        text = "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(1, 500)))
    return text


HF_BASES: list[dict[str, Any]] = [
    {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
     "num_experts_per_tok": 2},
    {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
     "num_hidden_layers": 61, "num_attention_heads": 128, "n_routed_experts": 256, "num_experts_per_tok": 8,
     "n_shared_experts": 1, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
     "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280},
    {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
     "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
     "sliding_window": 4096},
    {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
     "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "num_experts": 128,
     "num_experts_per_tok": 8, "vocab_size": 151936, "decoder_sparse_step": 1, "mlp_only_layers": []},
    {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
]
HF_KEYS = sorted({k for base in HF_BASES for k in base}
                 | {"head_dim", "layer_types", "hidden_act", "tie_word_embeddings", "max_position_embeddings",
                    "moe_layer_freq"})


def gen_hf_config(rng: random.Random) -> dict[str, Any]:
    """A real config with 1-4 fields set to junk (or dropped)."""
    cfg = dict(rng.choice(HF_BASES))
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(HF_KEYS)
        if rng.random() < 0.15:
            cfg.pop(key, None)
        else:
            cfg[key] = rng.choice(JUNK) if rng.random() < 0.7 else rng.randint(-3, 2**rng.randint(1, 24))
    if rng.random() < 0.05:
        cfg["model_type"] = rng.choice(["mistral", "phi3", "gemma", "qwen2", "phi", "", 7, None, "LLAMA"])
    return cfg


SPLICES = [".inf", "-.inf", ".nan", "0", "-1", "1e400", "[]", "{}", "x", "~", "99999999999999999999", "!!binary aGk=",
           "*nope", "&a 1"]


def _sweep_text() -> str:
    return (ROOT / "evals" / "data" / "korthikanti-2022.yaml").read_text(encoding="utf-8")


def gen_sweep_yaml(rng: random.Random, base: str) -> str:
    """A real sweep file with junk spliced in, anchors/aliases, deep nesting, non-finite numbers or cut short."""
    kind = rng.random()
    lines = base.splitlines()
    if kind < 0.35:
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(lines))
            if ":" in lines[i]:
                head = lines[i].split(":", 1)[0]
                lines[i] = f"{head}: {rng.choice(SPLICES)}"
        return "\n".join(lines)
    if kind < 0.5:
        depth = rng.randint(1, 10)
        bomb = "a: &a [" + ",".join(['"lol"'] * 9) + "]\n"
        for level in range(depth):
            prev, name = chr(97 + level), chr(98 + level)
            bomb += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        return bomb + f"source: x\nsweeps: [*{chr(97 + depth)}]\n"
    if kind < 0.6:
        n = rng.randint(10, 20000)
        return "source: x\nsweeps: " + "[" * n + "]" * n + "\n"
    if kind < 0.7:
        n = rng.randint(10, 400)
        return "source: x\nsweeps:\n" + "".join("  " * (i + 1) + "- k:\n" for i in range(n))
    if kind < 0.85:
        cut = rng.randrange(len(base))
        return base[:cut]
    return "".join(chr(rng.randint(0, 0x7F)) for _ in range(rng.randint(0, 2000)))


TOOL_ARGS: dict[str, dict[str, Any]] = {
    "list_models": {}, "list_hardware": {"vendor": "amd"},
    "legal_axes": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "seq_len": 4096},
    "check_memory": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                     "layout": {"tp": 2, "pp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096}},
    "project": {"model": "mixtral-8x7b", "gpu": "mi300x", "num_gpus": 16,
                "layout": {"tp": 2, "ep": 8, "mbs": 1, "gbs": 64, "seq_len": 4096}},
    "search": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 64, "seq_len": 4096, "top_k": 2},
    "compare": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                "layouts": [{"tp": 1, "gbs": 32, "seq_len": 2048}, {"tp": 2, "gbs": 32, "seq_len": 2048}]},
    "explain": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "a": {"tp": 1, "gbs": 32, "seq_len": 2048},
                "b": {"tp": 2, "gbs": 32, "seq_len": 2048}},
    "export_launch_config": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                             "layout": {"tp": 2, "gbs": 32, "seq_len": 4096}, "framework": "megatron"},
}
SLOW_TOOLS = ("search", "tune")
SLOW_DEADLINE_S = [20.0]
"""The server deadline given to search/tune calls: below the hang bound (run() sets it to 60% of --hang-s), so a
slow call ends in its structured deadline_exceeded error (handled) rather than in the hang timer."""


def _mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    if isinstance(value, dict) and value and rng.random() < 0.8 and depth < 3:
        out = dict(value)
        key = rng.choice(list(out))
        roll = rng.random()
        if roll < 0.15:
            out.pop(key)
        elif roll < 0.3:
            out[rng.choice(["tool", "self", "name", "arguments", "profile_path", "zzz", key + "_x"])] = rng.choice(JUNK)
        else:
            out[key] = _mutate(out[key], rng, depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.5:
        return [_mutate(v, rng, depth + 1) for v in value] * rng.choice([1, 1, 2, 50])
    if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.5:
        return rng.choice([0, -1, value * 2, value * 1024, 2**31, 131072, 131073, 1048577, 2**62])
    return rng.choice(JUNK)


def gen_tool_call(rng: random.Random, secret_file: str) -> tuple[str, dict[str, Any], bool]:
    """(tool, arguments, untrusted): a valid call mutated 0-3 times, sometimes naming a secret file."""
    name = rng.choice([*TOOL_ARGS, "nope", "tune"])
    args: Any = json.loads(json.dumps(TOOL_ARGS.get(name, {"request": "tune llama3 8b on 8 h100"})))
    for _ in range(rng.randint(0, 3)):
        args = _mutate(args, rng)
    if rng.random() < 0.1 and isinstance(args, dict):
        args[rng.choice(["profile_path", "model"])] = secret_file
    return name, args, rng.random() < 0.8


CLI_FLAGS = {"--model": ["llama3-8b", "mixtral-8x7b", "nope", "", "{}", "/etc/passwd"],
             "--gpu": ["h100-sxm", "mi300x", "b200", "nope"], "--gpus": None, "--tp": None, "--pp": None,
             "--vpp": None, "--ep": None, "--cp": None, "--mbs": None, "--gbs": None, "--seq-len": None,
             "--precision": ["bf16", "fp8", "nvfp4", "fp9"], "--recompute": ["none", "full", "sometimes"],
             "--zero": None}


def gen_cli(rng: random.Random) -> list[str]:
    """A `projtune project|memory|export|tools call` command line with random (often absurd) flags."""
    command = rng.choice([["project"], ["memory"], ["project", "--json"], ["memory", "--json"],
                          ["export", "--framework", rng.choice(["megatron", "primus", "torchtitan", "x"])],
                          ["tools", "call"]])
    if command[0] == "tools":
        name, args, _ = gen_tool_call(rng, "/dev/null")
        if name in SLOW_TOOLS:
            name = "project"
        try:
            text = json.dumps(args, allow_nan=True)
        except (TypeError, ValueError):
            text = "{"
        return [*command, name, "--args", text if rng.random() < 0.9 else text[: rng.randrange(len(text) + 1)]]
    argv = [*command, "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "32", "--seq-len", "4096"]
    for _ in range(rng.randint(1, 5)):
        flag = rng.choice(list(CLI_FLAGS))
        choices = CLI_FLAGS[flag]
        value = rng.choice(choices) if choices else _number_text(rng)
        argv += [flag, value]
    return argv


# ---------------------------------------------------------------- checks (one input each)


def check_request(text: str) -> str | None:
    from agent.text.request import Clarification, TuneRequest, parse_request

    out = parse_request(text)
    if not isinstance(out, TuneRequest | Clarification):
        return f"parse_request returned {type(out).__name__}"
    return "non_finite" if non_finite(out.model_dump()) else None


def check_hf(cfg: dict[str, Any]) -> str | None:
    from projection.engine import project
    from projection.errors import ProjtuneError
    from projection.hardware import load_hardware
    from projection.model_spec import model_from_hf_config
    from projection.training_config import Cluster, TrainingConfig

    try:
        spec = model_from_hf_config(cfg)
    except ProjtuneError:
        return None
    hardware = load_hardware("h100-sxm")
    try:
        p = project(spec, Cluster(gpu="h100-sxm", num_gpus=8), TrainingConfig(tp=1, gbs=8, seq_len=512),
                    hardware=hardware)
    except ProjtuneError:
        return None
    values = [p.iteration_time_s, p.tokens_per_s_per_gpu, p.mfu, p.memory.peak_bytes]
    if any(not math.isfinite(v) for v in values):
        return "non_finite"
    if p.memory.peak_bytes <= 0 or p.iteration_time_s <= 0:
        return "non_finite"   # a non-physical output counts with the non-finite ones
    return None


def check_sweep(text: str, folder: Path, good: Path) -> str | None:
    from evals.sweep_file import load_sweep_files

    bad = folder / "fuzz.yaml"
    bad.write_text(text, encoding="utf-8", errors="surrogatepass")
    loaded = load_sweep_files([good, bad])
    if not any(s.file == str(good) for s in loaded.sweeps):
        return "traceback"   # the good file must still load next to a broken one
    shown = "\n".join(str(e) for e in loaded.errors)
    if len(shown) > 100_000:
        return "traceback"   # an issue report that explodes (billion laughs printed)
    for sweep in loaded.sweeps:
        for run in sweep.sweep.runs:
            if non_finite(run.measured.model_dump()):
                return "non_finite"
    return None


def check_tool(name: str, args: Any, untrusted: bool) -> str | None:
    from tools.registry import call_tool

    deadline = SLOW_DEADLINE_S[0] if name in SLOW_TOOLS else None
    payload = call_tool(name, args, untrusted=untrusted, deadline_s=deadline)
    if not isinstance(payload, dict) or not isinstance(payload.get("ok"), bool):
        return "traceback"
    text = json.dumps(payload, default=str)
    if SECRET in text:
        return "leak"
    if payload["ok"] and non_finite(payload["result"]):
        return "non_finite"
    if not payload["ok"] and "internal error" in str(payload.get("error", {}).get("message", "")):
        return "traceback"
    return None


def check_cli(argv: list[str]) -> str | None:
    from typer.testing import CliRunner

    from projtune.cli import app

    result = CliRunner().invoke(app, argv)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback"
    if result.exit_code not in (0, 1, 2) or "Traceback" in result.output:
        return "traceback"
    if "--json" in argv and result.exit_code == 0:
        try:
            strict_json(result.stdout)
        except ValueError:
            return "non_finite"
    return None


# ---------------------------------------------------------------- driver


def run(total: int, seed: int, hang_s: float, only: list[str]) -> dict[str, Counter[str]]:
    rng = random.Random(seed)
    SLOW_DEADLINE_S[0] = 0.6 * hang_s
    counts: dict[str, Counter[str]] = {}
    shown = 0
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        secret = folder / "secret.yaml"
        secret.write_text(f"token: {SECRET}\n")
        good = folder / "good.yaml"
        base = _sweep_text()
        good.write_text(base)
        targets: dict[str, tuple[float, Callable[[], tuple[Any, Callable[[], str | None]]]]] = {
            "requests": (0.35, lambda: (t := gen_request(rng), lambda: check_request(t))),
            "hf_configs": (0.25, lambda: (c := gen_hf_config(rng), lambda: check_hf(c))),
            "tools": (0.2, lambda: (c := gen_tool_call(rng, str(secret)), lambda: check_tool(*c))),
            "sweep_yaml": (0.1, lambda: (y := gen_sweep_yaml(rng, base), lambda: check_sweep(y, folder, good))),
            "cli": (0.1, lambda: (a := gen_cli(rng), lambda: check_cli(a))),
        }
        import fuzz_surfaces as surfaces

        remote = surfaces.RemoteFolders()
        targets.update({   # issue 29: the input surfaces beyond the tool layer, with meaning oracles
            "diagnose": (0.06, lambda: (d := surfaces.gen_diagnose(rng), lambda: surfaces.check_diagnose(d, folder))),
            "training_logs": (0.1, lambda: (t := surfaces.gen_log(rng), lambda: surfaces.check_log(t, folder))),
            "request_numbers": (0.25, lambda: (q := surfaces.gen_request_numbers(rng),
                                               lambda: surfaces.check_request_numbers(q))),
            "remote_paths": (0.05, lambda: (r := surfaces.gen_remote(rng), lambda: surfaces.check_remote(r, remote))),
        })
        targets = {k: v for k, v in targets.items() if not only or k in only}
        weight = sum(w for w, _ in targets.values())
        assigned = 0
        for index, (name, (share, make)) in enumerate(targets.items()):
            last = index == len(targets) - 1   # the last target takes the rounding rest: inputs sum to --inputs
            n = max(1, total - assigned if last else round(total * share / weight))
            assigned += n
            c = counts.setdefault(name, Counter())
            start = time.perf_counter()
            for _ in range(n):
                case, check = make()
                c["inputs"] += 1
                signal.setitimer(signal.ITIMER_REAL, hang_s)
                try:
                    problem = check()
                except Hang:
                    problem = "hang"
                except Exception:  # noqa: BLE001 - this is what the fuzz counts
                    problem = "traceback"
                    if shown < 8:
                        print(f"--- {name} traceback on {str(case)[:300]!r}\n{traceback.format_exc(limit=6)}",
                              file=sys.stderr)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if problem:
                    c[problem] += 1
                    if shown < 8:
                        print(f"--- {name} {problem} on {str(case)[:300]!r}", file=sys.stderr)
                    shown += 1
            c["seconds"] = round(time.perf_counter() - start)
        remote.close()
    return counts


WORST_CASES = (  # (schedule, pp, vpp, micro-batches): micro-batches x pp x vpp at the legality limits
    ("zbv", 64, 2, 256), ("zbv", 16, 2, 1024), ("zero-bubble", 16, 1, 8192), ("interleaved", 16, 8, 1024),
    ("gpipe", 16, 1, 8192),
    ("1f1b", 16, 1, 8192), ("1f1b", 1, 1, 16384),
)


def worst_cases() -> list[tuple[str, float, float]]:
    """(case, seconds, peak RSS MiB so far) of one projection at the bounded-work limits (llama3.1-405b, H100)."""
    import resource

    from projection.engine import project
    from projection.hardware import load_hardware
    from projection.legality import MAX_PIPELINE_OPS, MAX_ZBV_OPS
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig

    model, hardware = load_model("llama3.1-405b"), load_hardware("h100-sxm")
    rows = []
    for schedule, pp, vpp, m in WORST_CASES:
        assert m * pp * vpp <= (MAX_ZBV_OPS if schedule == "zbv" else MAX_PIPELINE_OPS)
        config = TrainingConfig(tp=8, pp=pp, vpp=vpp, mbs=1, gbs=m, seq_len=8192, pp_schedule=schedule)
        start = time.perf_counter()
        project(model, Cluster(gpu="h100-sxm", num_gpus=pp * 8), config, hardware=hardware)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append((f"{schedule} pp{pp} vpp{vpp} m{m}", time.perf_counter() - start, rss))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-s", type=float, default=10.0)
    parser.add_argument("--worst", action="store_true", help="also time one projection at each bounded-work limit")
    parser.add_argument("--only", default="", help="comma-separated targets: requests,hf_configs,tools,sweep_yaml,cli,"
                                                   "diagnose,training_logs,request_numbers,remote_paths")
    args = parser.parse_args()
    counts = run(args.inputs, args.seed, args.hang_s, [t for t in args.only.split(",") if t])
    keys = ("tracebacks", "hangs", "non_finite", "leaks", "blowups", "misread", "bad_import")
    totals = Counter()
    print(f"{'target':15s} {'inputs':>7s} " + " ".join(f"{k:>10s}" for k in (*keys, "roundtrip")) + "  seconds")
    for name, c in counts.items():
        row = {"tracebacks": c["traceback"], "hangs": c["hang"], "non_finite": c["non_finite"], "leaks": c["leak"],
               "blowups": c["blowup"], "misread": c["misread"], "bad_import": c["invalid_import"],
               "roundtrip": c["roundtrip"]}
        totals.update({"inputs": c["inputs"], **row})
        print(f"{name:15s} {c['inputs']:7d} " + " ".join(f"{row[k]:10d}" for k in (*keys, "roundtrip"))
              + f"  {c['seconds']:7d}")
    print(f"{'total':15s} {totals['inputs']:7d} " + " ".join(f"{totals[k]:10d}" for k in (*keys, "roundtrip")))
    print("(roundtrip: export -> diagnose gave back another layout; reported, not part of the acceptance)")
    if args.worst:
        print("\none projection at the bounded-work limits (seconds, process peak RSS):")
        for case, seconds, rss in worst_cases():
            print(f"  {case:32s} {seconds:6.2f} s  {rss:6.0f} MiB")
    return 0 if all(totals[k] == 0 for k in keys) else 1


if __name__ == "__main__":
    raise SystemExit(main())
