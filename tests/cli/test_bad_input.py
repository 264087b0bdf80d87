"""Typical user mistakes on the commands that did not yet name the nearest valid value (exit 2, one line)."""

from __future__ import annotations

from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()
LAYOUT = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "2", "--mbs", "1", "--gbs", "256",
          "--seq-len", "8192"]


def _one_line_error(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_tune_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["tune", "tune llama3 8b on 64 h100", "--framework", "torchtitn"])
    assert line == ("error: --framework: 'torchtitn' is not one of megatron, megatron-bridge, primus, torchtitan, "
                    "maxtext; did you mean 'torchtitan'?")


def test_chat_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["chat", "--framework", "maxtxt"])
    assert line.endswith("did you mean 'maxtext'?")


def test_export_misspelt_framework_names_the_nearest() -> None:
    line = _one_line_error(["export", *LAYOUT, "--framework", "torchtitn"])
    assert line.endswith("(got 'torchtitn'); did you mean 'torchtitan'?")


def test_tune_anchor_of_another_gpu_is_a_usage_error_before_any_trial() -> None:
    """`project`/`search --anchor` refused it in one line; `tune` ran every round, then answered "no layout:
    search failed: anchor ..." with exit code 1."""
    from pathlib import Path

    sweep = Path(__file__).resolve().parents[2] / "evals" / "data" / "torchtitan.yaml"
    line = _one_line_error(["tune", "tune llama3 8b on 64 h100", "--offline", "--anchor", str(sweep)])
    assert "measured on h100-96gb-500w, the target is h100-sxm; an anchor must be a run on the target's GPU type" \
        in line


def test_malformed_layout_file_names_the_line_without_the_parser_excerpt(tmp_path) -> None:
    """The message was PyYAML's multi-part text with a literal '\\n  in "<unicode string>", line 2, column 6'."""
    layout = tmp_path / "layout.yaml"
    layout.write_text("model: llama3-8b\n  bad: [\n")
    line = _one_line_error(["project", "-c", str(layout)])
    assert line == (f"error: cannot parse layout file '{layout}', line 2: malformed YAML: mapping values are not "
                    "allowed in this context")


def test_a_cache_path_that_is_a_file_is_one_line_not_a_traceback(tmp_path) -> None:
    """`PROJTUNE_CACHE` naming a file: NotADirectoryError escaped `bench run` as a traceback (the CLI edge caught
    only FileNotFoundError, IsADirectoryError and PermissionError)."""
    cache = tmp_path / "cache-file"
    cache.write_text("")
    result = runner.invoke(app, ["bench", "run", "--cpu", "-m", "llama3-8b", "-g", "h100-sxm", "-n", "8", "--tp", "1",
                                 "--mbs", "1", "--gbs", "8", "--seq-len", "1024"], env={"PROJTUNE_CACHE": str(cache)})
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: Not a directory: {cache / 'bench'}"
    assert not isinstance(result.exception, OSError)


def test_mcp_refuses_a_bad_setting_at_start() -> None:
    """An invalid PROJTUNE_TOOL_DEADLINE was only noticed by each tool call (the server started, exit 0)."""
    result = runner.invoke(app, ["mcp"], env={"PROJTUNE_TOOL_DEADLINE": "abc"}, input="")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: PROJTUNE_TOOL_DEADLINE='abc' is not valid")


def test_misspelt_layout_file_key_names_the_nearest(tmp_path) -> None:
    """A layout file's `seq_lenn` said only "seq_lenn: unknown key (got 8192)"."""
    layout = tmp_path / "layout.yaml"
    layout.write_text("model: llama3-8b\ncluster: {gpu: h100-sxm, num_gpus: 64}\n"
                      "config: {tp: 2, mbs: 1, gbs: 256, seq_lenn: 8192}\n")
    line = _one_line_error(["project", "-c", str(layout)])
    assert line.startswith("error: unknown layout key 'seq_lenn' (allowed: tp, pp, ") and \
        line.endswith("; did you mean seq_len?)")


def test_unknown_flop_formula_is_refused_not_priced_as_megatron() -> None:
    """`project --flops foo` answered with the megatron formula's MFU (anything but '6nd' was megatron)."""
    line = _one_line_error(["project", *LAYOUT, "--flops", "foo"])
    assert line == "error: unknown FLOP formula 'foo' (known: 6nd, megatron)"


def test_eval_with_an_unreadable_profile_stops_before_any_run(tmp_path) -> None:
    """`eval --profile BINARY` skipped all 411 runs, each with the profile's error, and exited 0; an empty
    profile folder quietly priced every run with the shipped profiles."""
    from pathlib import Path

    sweep = str(Path(__file__).resolve().parents[2] / "evals" / "data" / "torchtitan.yaml")
    binary = tmp_path / "profile.yaml"
    binary.write_bytes(b"\x00\xff\xfe")
    assert _one_line_error(["eval", sweep, "--profile", str(binary)]).startswith(
        f"error: profile file '{binary}' is not a valid device profile")
    folder = tmp_path / "profiles"
    folder.mkdir()
    assert _one_line_error(["eval", sweep, "--profile", str(folder)]).startswith(
        f"error: profile folder '{folder}' holds no <hardware id|family>.yaml profile")


def test_sweeps_validate_of_an_empty_folder_is_an_issue_not_a_pass(tmp_path) -> None:
    """`sweeps validate EMPTY_DIR` printed "0 sweeps, 0 runs, 0 issues" and exited 0: nothing was checked."""
    result = runner.invoke(app, ["sweeps", "validate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stdout == f"{tmp_path}: a folder without sweep files (*.yaml / *.yml)\n"


def test_unknown_catalog_model_in_a_sweep_is_a_load_issue_with_the_nearest(tmp_path) -> None:
    """A sweep naming model 'llama3-8bb' validated with 0 issues; eval then skipped its runs one by one."""
    sweep = tmp_path / "s.yaml"
    sweep.write_text("source: x\nsweeps:\n- name: s1\n  model: llama3-8bb\n  cluster: {gpu: h100-sxm, num_gpus: 64}\n"
                     "  fixed: {tp: 2, mbs: 1, gbs: 256, seq_len: 8192}\n  runs:\n  - config: {}\n"
                     "    measured: {tokens_per_sec_per_gpu: 5000}\n")
    result = runner.invoke(app, ["sweeps", "validate", str(sweep)])
    assert result.exit_code == 2
    assert result.stdout.startswith(f"{sweep}:3: sweep 's1': model: unknown model 'llama3-8bb'; did you mean "
                                    "llama3-8b, llama3.1-8b, llama3-70b? (known: deepseek-v3, ")


def test_sweeps_import_refuses_an_unknown_model() -> None:
    """`sweeps import LOG --model llama3-8bb` wrote a sweep file no command could project."""
    from pathlib import Path

    log = Path(__file__).resolve().parents[1] / "evals" / "fixtures" / "megatron_llama3_8b_tp4_pp2.log"
    line = _one_line_error(["sweeps", "import", str(log), "--gpu", "h100-sxm", "--model", "llama3-8bb"])
    assert "unknown model 'llama3-8bb'; did you mean llama3-8b, llama3.1-8b, llama3-70b? (known: " in line


def test_anchor_log_without_a_gpu_count_says_how_to_give_it(tmp_path) -> None:
    """The message said "pass --num-gpus", an option no command has (and `project` cannot take the anchor's)."""
    log = tmp_path / "run.log"
    log.write_text(" iteration       10/     100 | consumed samples:  2560 | elapsed time per iteration (ms): "
                   "3900.1 | throughput per GPU (TFLOP/s/GPU): 400.0 |\n")
    line = _one_line_error(["project", *LAYOUT, "--anchor", str(log)])
    assert line == (f"error: anchor log {log}: GPU count not found in the logs (world_size / device mesh); import it "
                    f"with `projtune sweeps import {log} --gpus ... --out run.yaml` and give run.yaml as the anchor")


def test_offline_with_llm_flags_is_a_contradiction_not_a_silent_choice() -> None:
    """`tune --offline --llm-base-url URL` ran offline and ignored the flag (an invalid --llm-timeout too)."""
    line = _one_line_error(["tune", "tune llama3 8b on 64 h100", "--offline", "--llm-base-url", "http://127.0.0.1:9/v1",
                            "--llm-timeout", "-1"])
    assert line == ("error: --offline and --llm-base-url, --llm-timeout contradict each other: offline, no LLM is "
                    "asked, so drop --offline to use the endpoint, or drop the LLM flags")


def test_calibrate_names_the_nearest_gpu_and_refuses_flags_it_would_ignore() -> None:
    """`calibrate --gpu h100-sx` said only "no complete scored runs of h100-sx"; `--gpu X --cross-validate`,
    `--bands-out` without --cross-validate and `--out-dir` without --all were ignored without a word."""
    from pathlib import Path

    sweep = str(Path(__file__).resolve().parents[2] / "evals" / "data" / "korthikanti-2022.yaml")
    assert _one_line_error(["calibrate", sweep, "--gpu", "a100-80g"]) == (
        "error: no complete scored runs of a100-80g in the given files; did you mean a100-80gb? (hardware ids in "
        "these sweeps: a100-80gb)")
    assert _one_line_error(["calibrate", sweep, "--cross-validate", "--gpu", "a100-80gb"]) == \
        "error: --gpu is not used with --cross-validate; drop it"
    assert _one_line_error(["calibrate", sweep, "--gpu", "a100-80gb", "--bands-out", "b.yaml"]) == \
        "error: --bands-out is not used with a fit (it goes with --cross-validate); drop it"
    assert _one_line_error(["calibrate", sweep, "--family", "ampere", "--out-dir", "d"]) == \
        "error: --out-dir is not used with a fit of one --gpu/--family (it goes with --all); drop it"


def test_misspelt_recompute_module_names_the_nearest_on_its_own_field(tmp_path) -> None:
    """It said "input: recompute_modules: unknown module(s) ['core_atn'] (allowed: ...) (got {'gbs': 256, ...})"
    (the whole layout quoted, no nearest name); a sweep file's module list was only checked run by run in eval."""
    line = _one_line_error(["project", *LAYOUT, "--recompute", "selective", "--recompute-modules", "core_atn"])
    assert line == ("error: recompute_modules: unknown recompute module 'core_atn' (allowed: core_attn, layernorm, mlp, "
                    "moe, moe_act, shared_experts, mla_up_proj; did you mean core_attn?) (got ('core_atn',))")
    sweep = tmp_path / "s.yaml"
    sweep.write_text("source: x\nsweeps:\n- name: s1\n  model: llama3-8b\n  cluster: {gpu: h100-sxm, num_gpus: 64}\n"
                     "  fixed: {tp: 2, mbs: 1, gbs: 256, seq_len: 8192, recompute: selective}\n  runs:\n"
                     "  - config: {recompute_modules: [core_atn]}\n    measured: {tokens_per_sec_per_gpu: 5000}\n")
    result = runner.invoke(app, ["sweeps", "validate", str(sweep)])
    assert result.exit_code == 2 and "did you mean core_attn?" in result.stdout


def test_bench_iteration_counts_below_their_minimum_are_usage_errors() -> None:
    """`bench run --cpu --iters 0` timed the layers, then died with StatisticsError('no median for empty data');
    `--warmup -1` was taken as 0."""
    from projtune.cli import usage_line

    bench = ["bench", "run", "--cpu", *LAYOUT]
    for flag, value, minimum in (("--iters", "0", 1), ("--warmup", "-1", 0)):
        result = runner.invoke(app, [*bench, flag, value], standalone_mode=False)
        assert usage_line(result.exception) == (f"error: Invalid value for '{flag}': Input should be greater than or "
                                                f"equal to {minimum}; see 'projtune bench run --help'")


def test_tools_call_args_file_that_is_not_text_is_one_line(tmp_path) -> None:
    """`tools call project -a @BINARY` escaped as a UnicodeDecodeError traceback."""
    binary = tmp_path / "args.json"
    binary.write_bytes(b"\x00\xff\xfe")
    assert _one_line_error(["tools", "call", "project", "-a", f"@{binary}"]) == \
        f"error: --args file '{binary}' is not UTF-8 text (byte 1): give a JSON object"


def test_moe_only_settings_on_a_dense_model_are_refused_not_ignored() -> None:
    """`project --dispatcher deepep` on llama3-8b projected it (the dispatcher ignored); `search -C
    moe_dispatcher=deepep` answered with alltoall layouts (the constraint dropped for a dense model)."""
    assert _one_line_error(["project", *LAYOUT, "--dispatcher", "deepep"]) == \
        "error: illegal layout: moe_dispatcher=deepep needs a MoE model ('llama3-8b' is dense)"
    assert _one_line_error(["memory", *LAYOUT, "--moe-routing", "token-drop"]) == \
        "error: illegal layout: moe_routing=token-drop needs a MoE model ('llama3-8b' is dense)"
    from tools.registry import call_tool

    out = call_tool("search", {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 64, "gbs": 256, "seq_len": 8192,
                               "constraints": {"moe_dispatcher": "deepep"}})
    assert out["ok"] and out["result"]["ranked"] == []
    assert "'moe_dispatcher=deepep' excludes every legal layout" in out["result"]["message"]


def test_a_model_folder_names_the_config_file_to_give(tmp_path) -> None:
    """`--model ./Llama-3-8B/` (a Hugging Face folder) said "unknown model '...' (known: deepseek-v3, ...)"."""
    line = _one_line_error(["project", *LAYOUT, "--model", str(tmp_path)])
    assert line == f"error: model '{tmp_path}' is a folder: give the path of its config.json, e.g. {tmp_path}/config.json"


def test_binary_files_are_named_as_not_text_without_their_bytes(tmp_path) -> None:
    """A binary profile, model config or layout file said only "UnicodeDecodeError" (or the codec's text); a
    binary sweep file quoted its bytes: "UnicodeDecodeError('utf-8', b'\\x00\\xff...', ...)"."""
    binary = tmp_path / "file.json"
    binary.write_bytes(b"{\x00\xff\xfe")
    why = "not UTF-8 text (byte 2 cannot be decoded; a binary file?)"
    assert _one_line_error(["project", *LAYOUT, "--profile", str(binary)]).endswith(f"device profile: {why}")
    assert _one_line_error(["project", *LAYOUT, "--model", str(binary)]) == \
        f"error: cannot parse model config '{binary}': {why}"
    assert _one_line_error(["project", "-c", str(binary)]) == f"error: cannot parse layout file '{binary}': {why}"
    assert _one_line_error(["eval", str(binary)]) == f"error: no sweep to evaluate: {binary}: refused: {why}"


def test_json_mode_errors_are_also_one_json_object_on_stdout() -> None:
    """With --json a bad input left stdout empty: a script reading the JSON got nothing to parse. The error line
    stays on stderr; stdout holds {"ok": false, "error": {"message", "exit_code"}} (the tools' envelope)."""
    import json

    result = runner.invoke(app, ["project", *LAYOUT, "--gpu", "h100-sx", "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert error["ok"] is False and error["error"]["exit_code"] == 2
    assert result.stderr.strip() == f"error: {error['error']['message']}"
    assert error["error"]["message"].startswith("unknown hardware 'h100-sx'; did you mean h100-sxm")
    plain = runner.invoke(app, ["project", *LAYOUT, "--gpu", "h100-sx"])
    assert plain.exit_code == 2 and plain.stdout == ""


def test_export_of_a_launcher_only_framework_to_a_config_name_is_refused(tmp_path) -> None:
    """`export --framework megatron --out y.toml` wrote llama3-8b_..._bf16.megatron.sh beside it and said so: the
    file asked for never existed."""
    target = tmp_path / "y.toml"
    assert _one_line_error(["export", *LAYOUT, "--framework", "megatron", "--out", str(target)]) == (
        "error: the megatron export is one launcher script (its arguments are in it): give a .sh file or a folder, "
        "not 'y.toml'")
    assert list(tmp_path.iterdir()) == []


def test_diagnose_gpus_zero_is_refused_not_read_as_missing() -> None:
    """`diagnose FILE -n 0` said "the file does not say the --gpus; pass --gpus ..." (0 was read as not given)."""
    from pathlib import Path

    from projtune.cli import usage_line

    launch = Path(__file__).resolve().parents[1] / "fixtures" / "launch" / "primus_mi355x_llama3.1_8b_bf16.yaml"
    result = runner.invoke(app, ["diagnose", str(launch), "--no-search", "-g", "mi355x", "-n", "0"],
                           standalone_mode=False)
    assert usage_line(result.exception).startswith("error: Invalid value for '--gpus' / '-n': '0' is out of range")


def test_a_folder_where_a_file_is_expected_is_named_a_folder(tmp_path) -> None:
    """`--profile DIR`, `--measured DIR`, `-c DIR` and `diagnose DIR` said the folder "does not exist"."""
    for args, kind in ((["project", *LAYOUT, "--profile"], "profile file "),
                       (["project", *LAYOUT, "--measured"], "measurement file "),
                       (["project", "-c"], "layout file "), (["diagnose"], "")):
        assert _one_line_error([*args, str(tmp_path)]).startswith(f"error: {kind}'{tmp_path}' is a folder, not a file")


def test_a_json_file_that_is_not_a_measurement_names_its_fields(tmp_path) -> None:
    """It said "... is not a projtune measurement file: 9 validation errors for Measurement" (which fields?)."""
    other = tmp_path / "m.json"
    other.write_text('{"a": 1}')
    assert _one_line_error(["bench", "project", "--measured", str(other)]) == (
        f"error: '{other}' is not a projtune measurement file: source: Field required; representative: Field "
        "required; device_name: Field required (and 6 more)")


def test_misspelt_tp_scaling_names_the_nearest(tmp_path) -> None:
    line = _one_line_error(["bench", "project", "--measured", str(tmp_path / "m.json"), "--tp-scaling", "linearr"])
    assert line == "error: --tp-scaling must be ratio or linear, got 'linearr'; did you mean 'linear'?"


def test_tune_flags_that_differ_from_the_request_text_are_said() -> None:
    """Regression: `tune "... with 4 NICs per node" --nics 8` let the flag win without a word, and a framework the
    request names beat --framework silently; the report's assumptions (and --json) now say which one was used."""
    import json

    request = "tune llama3 8b on 16 h100 with gbs 64, precision=bf16, mbs<=2, 4 NICs per node, with torchtitan"
    result = runner.invoke(app, ["tune", request, "--nics", "8", "--framework", "megatron", "--offline", "--rounds",
                                 "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["request"]["nics_per_node"] == 8 and report["request"]["framework"] == "torchtitan"
    said = report["assumptions"]
    assert "--nics 8 used; the request text said 4 (nics_per_node; a flag wins over the request text)" in said
    assert not any(line.startswith("network: 4 NICs per node") for line in said)   # the overridden reading is gone
    assert ("framework: torchtitan (named in the request) used, not --framework megatron (a framework named in the "
            "request wins over --framework)") in said
    same = runner.invoke(app, ["tune", request, "--nics", "4", "--framework", "torchtitan", "--offline", "--rounds",
                               "1", "--json"])
    assert same.exit_code == 0, same.output
    assert not any("wins over" in line for line in json.loads(same.stdout)["assumptions"])   # agreeing: no note
    help_text = " ".join(runner.invoke(app, ["tune", "--help"]).stdout.replace("│", " ").split())
    assert "wins over NICs per node the request text names" in help_text          # the precedence, documented


def test_a_schedule_the_search_never_enumerates_is_said_not_no_layout() -> None:
    """Regression: `search -C pp_schedule=zbv` answered "'pp_schedule=zbv' excludes every legal layout" although
    ZB-V layouts are legal (and Primus runs them): the search space holds 1f1b, zero-bubble (vpp 1) and interleaved
    only, which the line now says, with the frameworks that run zbv (the space is not widened)."""
    search = ["search", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "16", "--gbs", "64", "--seq-len", "4096",
              "-C", "pp_schedule=zbv"]
    result = runner.invoke(app, search)
    assert result.exit_code == 1, result.output
    assert ("no layout: pp_schedule=zbv is not in the search space: for llama3-8b on 16 x h100-sxm the search "
            "enumerates 1f1b, interleaved, zero-bubble only; primus, torchtitan run zbv; project a layout with it "
            "instead (projtune project ... --schedule zbv --vpp 2)") in " ".join(result.stdout.split())
    megatron = " ".join(runner.invoke(app, [*search[:-1], "pp_schedule=zero-bubble", "--framework", "megatron"])
                        .stdout.split())
    assert ("pp_schedule=zero-bubble is searched, but megatron does not run it: for llama3-8b on 16 x h100-sxm with "
            "megatron the search enumerates 1f1b, interleaved only; primus runs zero-bubble") in megatron
