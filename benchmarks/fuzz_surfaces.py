"""Fuzz targets for the input surfaces beyond the tool layer (issue 29), with oracles that check meaning.

Four generators, each paired with a check that returns a problem name or None:

- ``diagnose``: a legal layout exported for Megatron-LM, Primus or torchtitan by
  ``export_launch_config``, then either left as is (oracle: ``diagnose`` gives the layout back;
  a difference counts as ``roundtrip``) or with one value replaced by a hostile form (Unicode
  digits, 5,000 digits, ``inf``, ``$TP``, two values, wrong TOML types, broken YAML shapes);
  the answer must be the layout or one line (exit 2), never a traceback;
- ``training_logs``: Megatron / torchtitan log templates with numbers replaced by hostile forms
  (``1.2.3``, huge ints, short meshes, wrong-shaped literals, strings where numbers stand); the
  import must succeed or raise one short LogImportError, the error text stays short (``blowup``
  when it passes :data:`MAX_MESSAGE`), and the process never passes :data:`MAX_RSS_BYTES`;
- ``request_numbers``: a GPU count, sequence length and batch size written in a random form a
  person uses (``8,192``, ``8 192``, ``1e3``, ``2^13``, ``8k``, ``sixty-four``) next to catalog
  names with digits; oracle: ``parse_request`` reads exactly those values (else ``misread``).
  Hostile forms (``-64``, ``NaN``, ``0x40``, ``8.5``, ``8kk``, two counts) must be asked back
  (a request read from them is a ``misread``);
- ``remote_paths``: tool calls over the remote path (``untrusted=True``) whose ``model`` names a
  file present in the working directory (holding a canary) or absent; oracle: the answer is the
  same either way (else ``leak``) and never holds the canary (``leak``).
"""

from __future__ import annotations

import json
import os
import random
import resource
import tempfile
from pathlib import Path
from typing import Any

MAX_MESSAGE = 2_000
"""Longest error message accepted from one input (characters)."""
MAX_RSS_BYTES = 2 * 1024 ** 3
"""Peak resident memory of the fuzzing process that counts as a blow-up (2 GiB)."""
CANARY = "fuzz-remote-canary-3e9a"

HOSTILE_NUMBERS = ["①", "²", "٣", "1" * 5000, "inf", "nan", "-1", "0", "$TP", "${TP}", "2 4", "1.2.3", "1e999",
                   "0x10", "8k", "", "'8'", "9" * 40, "1,024", "True", "None", "[1, 2]", "{}", "8.5"]
TITAN_VALUES = ["inf", "nan", "1979-05-27", '"2"', "true", "-5", "0", "[1, 2]", "{a = 1}", "1e400", "99999999999",
                '"op"', '"0"', '"x"', "3.5"]
YAML_SHAPES = ["modules: [1, 2]\n", "modules:\n  pre_trainer: 3\n", "modules:\n  pre_trainer:\n    overrides: [x]\n",
               "[1, 2]\n", "modules:\n  pre_trainer:\n    overrides:\n      global_batch_size: 0512\n",
               "modules:\n  pre_trainer:\n    overrides:\n      seq_length: 1\n      seq_length: 2\n",
               "modules: " + "[" * 3000 + "]" * 3000 + "\n", "a: &a [1]\nb: *a\n", ""]
LAYOUTS: list[tuple[str, str, int, dict[str, Any]]] = [
    ("megatron", "llama3-8b", 64, {}), ("primus", "llama3-8b", 64, {}), ("torchtitan", "llama3-8b", 64, {}),
    ("megatron", "mixtral-8x7b", 64, {"ep": [1, 2, 4, 8]}), ("torchtitan", "llama3-70b", 128, {}),
    ("primus", "llama3-70b", 128, {}),
]


def _layout(rng: random.Random, extra: dict[str, list[int]]) -> dict[str, Any]:
    values: dict[str, Any] = {"tp": rng.choice([1, 2, 4, 8]), "pp": rng.choice([1, 2, 4]), "mbs": rng.choice([1, 2]),
                              "gbs": rng.choice([128, 256, 512]), "seq_len": rng.choice([2048, 4096, 8192]),
                              "zero": rng.choice([0, 1]), "recompute": rng.choice(["none", "full", "selective"])}
    values["sequence_parallel"] = values["tp"] > 1 and rng.random() < 0.7
    for key, choices in extra.items():
        values[key] = rng.choice(choices)
    return values


def gen_diagnose(rng: random.Random) -> dict[str, Any]:
    """(framework, model, gpus, file name, text, mutated?, layout) of one exported launch file."""
    from projection.errors import ProjtuneError
    from projection.legality import layout_violations
    from projection.model_spec import load_model
    from projection.training_config import Cluster, TrainingConfig
    from projection.hardware import load_hardware
    from tools.exports import export_launch_config
    from tools.framework_rules import framework_violations

    framework, model, gpus, extra = rng.choice(LAYOUTS)
    spec, cluster = load_model(model), Cluster(gpu="h100-sxm", num_gpus=gpus)
    for _ in range(20):
        values = _layout(rng, extra)
        try:
            config = TrainingConfig(**values)
            if layout_violations(spec, load_hardware("h100-sxm"), cluster, config) or \
                    framework_violations(framework, spec, cluster, config):
                continue   # the oracle holds for layouts the framework can launch
            exported = export_launch_config(spec, cluster, config, framework)
            break
        except (ProjtuneError, ValueError):
            continue
    else:
        return {"framework": framework, "model": model, "gpus": gpus, "name": "args.sh", "text": "--tp 1",
                "mutated": True, "layout": None}
    text, mutated = exported.text, rng.random() < 0.6
    if mutated:
        text = _mutate_launch(rng, framework, text)
    return {"framework": framework, "model": model, "gpus": gpus, "name": exported.filename, "text": text,
            "mutated": mutated, "layout": None if exported.warnings else values}   # warned: written differently


def _mutate_launch(rng: random.Random, framework: str, text: str) -> str:
    import re

    if framework == "primus" and rng.random() < 0.3:
        return rng.choice(YAML_SHAPES)
    if framework == "torchtitan":
        ints = list(re.finditer(r"^(\w+) = (-?[0-9]+)$", text, re.M))
        if ints:
            m = rng.choice(ints)
            return text[:m.start(2)] + rng.choice(TITAN_VALUES) + text[m.end(2):]
        return text
    numbers = list(re.finditer(r"(?<=[ :])[0-9]+\b", text))
    if not numbers:
        return text
    m = rng.choice(numbers)
    text = text[:m.start()] + rng.choice(HOSTILE_NUMBERS) + text[m.end():]
    if rng.random() < 0.2:
        text += " --tensor-model-parallel-size 3" if framework == "megatron" else "\n"
    return text


KEYS = ("tp", "pp", "vpp", "cp", "ep", "mbs", "gbs", "seq_len", "recompute", "sequence_parallel", "zero")


def check_diagnose(case: dict[str, Any], folder: Path) -> str | None:
    from evals.log_import import LogImportError, parse_log
    from projection.errors import ProjtuneError
    from tools.diagnose import diagnose

    path = folder / Path(case["name"]).name
    path.write_text(case["text"], encoding="utf-8")
    try:
        result = diagnose(str(path), model=case["model"], gpu="h100-sxm", num_gpus=case["gpus"], search=False,
                          log_reader=parse_log)
    except (ProjtuneError, LogImportError) as err:
        message = str(err)
        if len(message) > MAX_MESSAGE or "\n" in message:
            return "blowup"
        return "roundtrip" if not case["mutated"] else None
    except ValueError as err:   # pydantic's ValidationError is a ValueError: the CLI prints it in one line
        return "blowup" if len(str(err)) > 50 * MAX_MESSAGE else None
    if case["mutated"] or case["layout"] is None:
        return None
    got = result.yours.config
    want = case["layout"]
    for key in KEYS:
        if key in want and got.get(key) != want[key]:
            return "roundtrip"
    return None


MEGATRON_LOG = """  context_parallel_size ........................... {cp}
  global_batch_size ............................... {gbs}
  hidden_size ..................................... {hidden}
  micro_batch_size ................................ {mbs}
  num_attention_heads ............................. {heads}
  num_layers ...................................... {layers}
  pipeline_model_parallel_size .................... {pp}
  seq_length ...................................... {seq}
  tensor_model_parallel_size ...................... {tp}
  world_size ...................................... {world}
  recompute_granularity ........................... {recompute}
 iteration       10/     100 | elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): {tf} |
 iteration       20/     100 | elapsed time per iteration (ms): {ms} | throughput per GPU (TFLOP/s/GPU): {tf} |
 iteration       30/     100 | elapsed time per iteration (ms): {ms} | global batch size: {gbs} |
[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: {mem} | reserved: 2.0
"""
TITAN_LOG = """Running with args: {{'training': {{'local_batch_size': {mbs}, 'seq_len': {seq}, \
'global_batch_size': {gbs}}}, \
'parallelism': {{'pipeline_parallel_degree': {pp}, 'pipeline_parallel_schedule': {schedule}}}, \
'activation_checkpoint': {ac}, 'model': {model}}}
Building {n}-D device mesh with [{names}], [{sizes}]
CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory
Building llama3 8B with TransformerModelArgs(dim={hidden}, n_layers={layers}, n_heads={heads}, n_kv_heads=8, \
vocab_size={vocab}, multiple_of={multiple}, ffn_dim_multiplier={ffn})
step:  1  loss: 12.2  memory: {mem}GiB(53.22%)  tps: {tps}  tflops: {tf}  mfu: {mfu}%
step:  2  loss: 12.2  memory: {mem}GiB(53.22%)  tps: {tps}  tflops: {tf}  mfu: {mfu}%
step:  3  loss: 12.2  memory: {mem}GiB(53.22%)  tps: {tps}  tflops: {tf}  mfu: {mfu}%
"""
LOG_JUNK = ["1.2.3", "9" * 400, "-1", "0", "inf", "nan", "'x'", "None", "[1, 2]", "{'a': 1}", "()", "True", "1e999",
            "'" + "x" * 50 + "'", "[" * 200 + "]" * 200, "٣", "1,000,000", "(1, (2, (3,)))"]


def gen_log(rng: random.Random) -> str:
    """A Megatron or torchtitan log with sane values, a few of them replaced by junk."""
    def pick(sane: Any) -> Any:
        return rng.choice(LOG_JUNK) if rng.random() < 0.25 else sane

    if rng.random() < 0.5:
        return MEGATRON_LOG.format(cp=pick(1), gbs=pick(256), hidden=pick(4096), mbs=pick(1), heads=pick(32),
                                   layers=pick(32), pp=pick(2), seq=pick(4096), tp=pick(4), world=pick(64),
                                   recompute=pick(rng.choice(["None", "full", "selective"])), ms=pick(1234.5),
                                   tf=pick(400.1), mem=pick(60000.0))
    names = ["'dp_shard'", "'tp'", "'pp'"][: rng.randint(1, 3)]
    sizes = [str(pick(rng.choice([1, 2, 8]))) for _ in range(len(names) + rng.choice([0, 0, 0, -1, 1]))]
    return TITAN_LOG.format(mbs=pick(2), seq=pick(8192), gbs=pick(-1), pp=pick(1), schedule=pick("'1F1B'"),
                            ac=pick("{'mode': 'selective'}"), model=pick("{'converters': ['float8']}"),
                            n=len(names), names=", ".join(names), sizes=", ".join(sizes), hidden=pick(4096),
                            layers=pick(32), heads=pick(32), vocab=pick(128256), multiple=pick(1024), ffn=pick(1.3),
                            mem=pick(42.1), tps=pick("7,023"), tf=pick(406.7), mfu=pick(41.1))


def check_log(text: str, folder: Path) -> str | None:
    from evals.log_import import LogImportError, import_logs, render_yaml
    from evals.sweep_file import load_sweep_files

    path = folder / "train.log"
    path.write_text(text, encoding="utf-8")
    out = folder / "imported.yaml"
    problem: str | None = None
    try:
        sweep = import_logs([path], gpu="h100-sxm", num_gpus=None if "world_size" in text or "mesh" in text else 64)
        out.write_text(render_yaml(sweep), encoding="utf-8")
        if load_sweep_files([out]).errors:
            problem = "invalid_import"   # `sweeps import` output must pass `sweeps validate`
    except LogImportError as err:
        problem = "blowup" if len(str(err)) > MAX_MESSAGE or "\n" in str(err) else None
    except ValueError as err:  # the sweep model refused a value: one line at the CLI (validation_message)
        problem = "blowup" if len(str(err)) > 50 * MAX_MESSAGE else None
    if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 > MAX_RSS_BYTES:
        problem = "blowup"
    return problem


_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
          "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
GPU_NAMES = [("h100", "h100-sxm"), ("H100", "h100-sxm"), ("gb200", "gb200"), ("GB200", "gb200"), ("mi300x", "mi300x"),
             ("MI300X", "mi300x"), ("b200", "b200"), ("mi355x", "mi355x"), ("H200", "h200")]
MODEL_NAMES = ["llama3 8b", "Llama 3 70B", "llama3.1-405b", "qwen3-235b-a22b", "mixtral 8x7b", "deepseek-v3"]


def written(rng: random.Random, n: int) -> str:
    """``n`` in a random form a person writes."""
    forms = [str(n)]
    if n >= 1000:
        forms += [f"{n:,}", f"{n:,}".replace(",", " "), f"{n:_}"]
    if n % 1024 == 0:
        forms.append(f"{n // 1024}k")
    if n > 1 and n & (n - 1) == 0:
        forms += [f"2^{n.bit_length() - 1}", f"2**{n.bit_length() - 1}"]
    if n % 1000 == 0 and n >= 1000:
        forms.append(f"{n // 1000}e3")
    if 2 <= n < 100:
        forms.append(_UNITS[n] if n < 20 else _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _UNITS[n % 10]))
    return rng.choice(forms)


BAD_COUNTS = ["-64", "NaN", "nan", "inf", "0x40", "8.5", "64, actually 128"]


def gen_request_numbers(rng: random.Random) -> dict[str, Any]:
    """A request with a GPU count, sequence length and batch size in random forms, and the values meant."""
    name, gpu = rng.choice(GPU_NAMES)
    gpus = rng.choice([2, 8, 16, 24, 64, 100, 128, 256, 1000, 1024, 2048, 4096, 8192, 12288])
    seq = rng.choice([1024, 2048, 4096, 8192, 16384, 32768])
    gbs = gpus * rng.choice([1, 2, 4])
    model = rng.choice(MODEL_NAMES)
    bad = rng.random() < 0.2
    count = rng.choice(BAD_COUNTS) if bad else written(rng, gpus)
    if count.endswith("actually 128"):
        count_text = rng.choice([f"64 {name}, actually 128", f"64 {name}, actually 128 {name}",
                                 f"64 {name}, I mean 128"])
    else:
        count_text = f"{count} {name}"
    text = rng.choice([f"tune {model} on {count_text}, seq {written(rng, seq)}, gbs {written(rng, gbs)}",
                       f"{model} on {count_text} gpus with global batch {written(rng, gbs)} and seq_len "
                       f"{written(rng, seq)}",
                       f"tune {model} for {count_text}; sequence length {written(rng, seq)}; gbs={written(rng, gbs)}"])
    return {"text": text, "bad": bad, "gpu": gpu, "num_gpus": gpus, "seq_len": seq, "gbs": gbs}


def check_request_numbers(case: dict[str, Any]) -> str | None:
    from agent.text.request import Clarification, TuneRequest, parse_request

    parsed = parse_request(case["text"])
    if case["bad"]:
        if isinstance(parsed, TuneRequest):
            return "misread"
        return None
    if isinstance(parsed, Clarification):
        if "num_gpus" in parsed.missing or "seq_len" in parsed.missing or "gbs" in parsed.missing \
                or "request" in parsed.missing:
            return "misread"
        return None   # a model name the catalog spells differently: asked back, not a number problem
    got = (parsed.num_gpus, parsed.seq_len, parsed.gbs)
    return None if got == (case["num_gpus"], case["seq_len"], case["gbs"]) else "misread"


REMOTE_NAMES = ["creds", "notes", "CONFIG.JSON", "config.json", "model.yaml", "Model.YML", "secret", "cfg.Json",
                "llama3-8b.json", ".env", "id_rsa", "creds.txt"]
REMOTE_TOOLS = {
    "check_memory": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "gbs": 32, "seq_len": 4096}},
    "project": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "gbs": 32, "seq_len": 4096}},
    "legal_axes": {"gpu": "h100-sxm", "num_gpus": 8, "seq_len": 4096},
    "compare": {"gpu": "h100-sxm", "num_gpus": 8, "layouts": [{"tp": 1, "gbs": 32, "seq_len": 2048}]},
    "export_launch_config": {"gpu": "h100-sxm", "num_gpus": 8, "layout": {"tp": 2, "gbs": 32, "seq_len": 4096},
                             "framework": "megatron"},
}


def gen_remote(rng: random.Random) -> tuple[str, dict[str, Any]]:
    tool = rng.choice(sorted(REMOTE_TOOLS))
    name = rng.choice(REMOTE_NAMES)
    if rng.random() < 0.3:
        name = rng.choice(["./", "../", "~/", "/tmp/", ""]) + name
    return tool, {"model": name, **REMOTE_TOOLS[tool]}


class RemoteFolders:
    """Two working directories: one holding a canary config under every remote name, one empty."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        root = Path(self._tmp.name)
        self.present, self.absent = root / "present", root / "absent"
        for folder in (self.present, self.absent):
            folder.mkdir()
        config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "_name_or_path": CANARY}
        for name in REMOTE_NAMES:
            (self.present / name).write_text(json.dumps(config))

    def close(self) -> None:
        self._tmp.cleanup()


def check_remote(call: tuple[str, dict[str, Any]], folders: RemoteFolders) -> str | None:
    from tools.registry import call_tool

    tool, arguments = call
    here = os.getcwd()
    answers = []
    try:
        for folder in (folders.present, folders.absent):
            os.chdir(folder)
            answers.append(json.dumps(call_tool(tool, dict(arguments), untrusted=True), sort_keys=True))
    finally:
        os.chdir(here)
    if CANARY in answers[0] or answers[0] != answers[1]:
        return "leak"
    return None
