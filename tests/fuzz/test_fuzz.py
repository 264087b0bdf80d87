"""Fuzzing in CI (issue 13): hypothesis strategies over requests, HF configs, sweep YAML, tool arguments and CLI flags.

Every example must end in an answer (a request or a question, a structured error, a one-line
CLI error with exit code 2) within :data:`fuzz_checks.EXAMPLE_LIMIT_S`, with no NaN/Infinity in
any result or ``--json`` output and no secret file content in any answer.  The budget (examples
per test, below) keeps the whole suite to about a minute on two cores; ``benchmarks/fuzz.py``
runs the long on-demand fuzz (>= 10,000 inputs).  The hypothesis profile (conftest) makes the
examples the same on every run unless a ``--hypothesis-seed`` is given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fuzz_checks import bounded, non_finite, strict_json
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agent.text.names import gpu_index, model_index
from agent.text.request import Clarification, TuneRequest, parse_request
from evals.sweep_file import load_sweep_files
from projection.engine import project
from projection.errors import ProjtuneError
from projection.hardware import load_hardware
from projection.model_spec import model_from_hf_config
from projection.training_config import MAX_GBS, MAX_GPUS, MAX_SEQ_LEN, Cluster, TrainingConfig
from projtune.cli import app
from tools.registry import call_tool

ROOT = Path(__file__).resolve().parents[2]
SECRET = "fuzz-secret-canary-91d2"
runner = CliRunner()

# ------------------------------------------------------------------ strategies

numbers = st.one_of(st.integers(-10, 10**12).map(str), st.sampled_from(["8k", "1M", "2k", "0", "1.5", "1e9", "½"]),
                    st.floats(0, 1e4, allow_nan=False).map(lambda f: f"{f:.2f}"))
words = st.sampled_from([
    *sorted(model_index())[:12], *sorted(gpu_index())[:12], "llama", "70b", "Mistral 7B", "qwen2", "gemma", "phi3",
    "tune", "on", "for", "with", "x", "gpus", "nodes", "gpus per node", "seq", "context", "gbs", "global batch",
    "tokens per step", "tokens", "top", "tp<=", "pp in 1,2", "no fp8", "use fp8", "fp4", "mxfp8", "bf16 only",
    "lora", "SFT", "headroom", "%", "must fit with", "NVL72", "NICs", "400G", "torchtitan", ",", "\n", "×", "🙂",
])
requests = st.one_of(
    st.lists(st.one_of(words, numbers), max_size=25).map(" ".join),
    st.text(max_size=300),
    st.tuples(st.sampled_from(["1", " ", "a-", "8x", "seq ", "1.", "tp in 1,", "9"]), st.integers(100, 2500)).map(
        lambda t: t[0] * t[1]),
)
junk = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.none(),
                 st.booleans(), st.text(max_size=20), st.just([]), st.just({}), st.sampled_from([0, -1, 1, 7]))
HF_BASE = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
HF_MOE = {**HF_BASE, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
hf_keys = st.sampled_from(sorted({*HF_MOE, "head_dim", "layer_types", "sliding_window", "moe_intermediate_size",
                                  "kv_lora_rank", "first_k_dense_replace", "max_position_embeddings"}))
hf_configs = st.tuples(st.sampled_from([HF_BASE, HF_MOE]), st.dictionaries(hf_keys, junk, max_size=4),
                       st.sampled_from([None, "mistral", "gemma", "phi3", "qwen2", "phi", "", 3])).map(
    lambda t: {**t[0], **t[1], **({"model_type": t[2]} if t[2] is not None else {})})

TOOL_ARGS: dict[str, dict[str, Any]] = {
    "legal_axes": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "seq_len": 4096},
    "check_memory": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                     "layout": {"tp": 2, "pp": 2, "mbs": 1, "gbs": 32, "seq_len": 4096}},
    "project": {"model": "mixtral-8x7b", "gpu": "mi300x", "num_gpus": 16,
                "layout": {"tp": 2, "ep": 8, "mbs": 1, "gbs": 64, "seq_len": 4096}},
    "compare": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                "layouts": [{"tp": 1, "gbs": 32, "seq_len": 2048}, {"tp": 2, "gbs": 32, "seq_len": 2048}]},
    "explain": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "a": {"tp": 1, "gbs": 32, "seq_len": 2048},
                "b": {"tp": 2, "gbs": 32, "seq_len": 2048}},
    "export_launch_config": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                             "layout": {"tp": 2, "gbs": 32, "seq_len": 4096}},
    "search": {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "gbs": 64, "seq_len": 4096, "top_k": 2},
}
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep", "mbs", "gbs", "seq_len", "zero", "precision", "recompute")
big_ints = st.sampled_from([0, -1, 3, 2**31, MAX_GBS + 1, MAX_GPUS + 1, MAX_SEQ_LEN + 1, 2**62, 10**30])


@st.composite
def tool_calls(draw: st.DrawFn, secret: str) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(TOOL_ARGS)))
    args = json.loads(json.dumps(TOOL_ARGS[name]))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["top", "layout", "extra", "file"]))
        if where == "top":
            args[draw(st.sampled_from(["model", "gpu", "num_gpus", "gpus_per_node", "seq_len", "gbs", "top_k"]))] = \
                draw(st.one_of(junk, big_ints))
        elif where == "layout" and isinstance(args.get("layout"), dict):
            args["layout"][draw(st.sampled_from(LAYOUT_KEYS))] = draw(st.one_of(junk, big_ints))
        elif where == "extra":
            args[draw(st.sampled_from(["tool", "self", "name", "zzz"]))] = draw(junk)
        else:
            args[draw(st.sampled_from(["profile_path", "model"]))] = secret
    return name, args


cli_values = st.one_of(numbers, st.sampled_from(["llama3-8b", "nope", "fp9", "full", "nvfp4", "", "-1"]))
cli_flags = st.lists(st.tuples(st.sampled_from(["--gpus", "--tp", "--pp", "--vpp", "--ep", "--cp", "--mbs", "--gbs",
                                                "--seq-len", "--zero", "--precision", "--recompute", "--model",
                                                "--gpu"]), cli_values), min_size=1, max_size=5)

# ------------------------------------------------------------------ tests


@settings(max_examples=1000)
@given(requests)
def test_requests_answer_or_ask_back(text: str) -> None:
    with bounded(5.0):
        out = parse_request(text)
    assert isinstance(out, TuneRequest | Clarification)
    if isinstance(out, TuneRequest):
        assert 1 <= out.num_gpus <= MAX_GPUS and 1 <= out.gbs <= MAX_GBS and 1 <= out.seq_len <= MAX_SEQ_LEN
    assert not non_finite(out.model_dump())


@settings(max_examples=600)
@given(hf_configs)
def test_hf_configs_are_validated_field_by_field(cfg: dict[str, Any]) -> None:
    with bounded():
        try:
            spec = model_from_hf_config(cfg)
        except ProjtuneError as err:
            assert str(err).startswith(("model config", "unsupported model_type")), err
            return
        try:
            p = project(spec, Cluster(gpu="h100-sxm", num_gpus=8), TrainingConfig(gbs=8, seq_len=512),
                        hardware=load_hardware("h100-sxm"))
        except ProjtuneError:
            return
    for value in (p.iteration_time_s, p.tokens_per_s_per_gpu, p.mfu, p.memory.peak_bytes):
        assert math.isfinite(value) and value > 0


def _sweep_text(draw: st.DrawFn) -> str:
    base = (ROOT / "evals" / "data" / "korthikanti-2022.yaml").read_text()
    kind = draw(st.sampled_from(["splice", "bomb", "deep", "cut", "noise"]))
    if kind == "splice":
        lines = base.splitlines()
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(lines) - 1))
            if ":" in lines[i]:
                value = draw(st.sampled_from([".inf", "-.inf", ".nan", "0", "-1", "[]", "{}", "x", "~", "1e999"]))
                lines[i] = lines[i].split(":", 1)[0] + ": " + value
        return "\n".join(lines)
    if kind == "bomb":
        depth = draw(st.integers(1, 9))
        text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        for level in range(depth):
            text += f"{chr(98 + level)}: &{chr(98 + level)} [" + ",".join([f"*{chr(97 + level)}"] * 9) + "]\n"
        return text + f"source: x\nsweeps: [*{chr(97 + depth)}]\n"
    if kind == "deep":
        n = draw(st.integers(50, 5000))
        return "source: x\nsweeps: " + "[" * n + "]" * n
    if kind == "cut":
        return base[:draw(st.integers(0, len(base)))]
    return draw(st.text(max_size=500))


@settings(max_examples=100)
@given(st.data())
def test_broken_sweep_files_are_reported_and_the_rest_loads(tmp_path_factory: pytest.TempPathFactory,
                                                            data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("sweeps")
    good = folder / "good.yaml"
    good.write_text((ROOT / "evals" / "data" / "korthikanti-2022.yaml").read_text())
    bad = folder / "bad.yaml"
    bad.write_text(_sweep_text(data.draw), encoding="utf-8", errors="surrogatepass")
    with bounded():
        loaded = load_sweep_files([good, bad])   # good first: a spliced copy repeats its sweep names
    assert any(s.file == str(good) for s in loaded.sweeps)
    assert len("\n".join(map(str, loaded.errors))) < 100_000
    for sweep in loaded.sweeps:
        for run in sweep.sweep.runs:
            assert not non_finite(run.measured.model_dump())


@settings(max_examples=400)
@given(st.data())
def test_tool_calls_never_raise_leak_or_go_non_finite(tmp_path_factory: pytest.TempPathFactory,
                                                      data: st.DataObject) -> None:
    secret = tmp_path_factory.getbasetemp() / "secret.yaml"
    secret.write_text(f"token: {SECRET}\n")
    name, args = data.draw(tool_calls(str(secret)))
    untrusted = data.draw(st.booleans())
    with bounded(30.0):
        payload = call_tool(name, args, untrusted=untrusted, deadline_s=20.0 if name == "search" else None)
    assert isinstance(payload["ok"], bool)
    text = json.dumps(payload)
    assert SECRET not in text
    assert "internal error" not in text, payload
    if payload["ok"]:
        assert not non_finite(payload["result"])


@settings(max_examples=150)
@given(st.sampled_from(["project", "memory"]), st.booleans(), cli_flags)
def test_cli_flags_end_in_one_line_or_strict_json(command: str, as_json: bool,
                                                   flags: list[tuple[str, str]]) -> None:
    argv = [command, "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "32", "--seq-len", "4096"]
    argv += [part for flag in flags for part in flag] + (["--json"] if as_json else [])
    with bounded():
        result = runner.invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1, 2) and "Traceback" not in result.output
    if as_json and result.exit_code == 0:
        strict_json(result.stdout)
