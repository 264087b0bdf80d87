"""NIC count and speed and the NVLink domain: parsed, carried to the cluster, used by the projection and legality.

A request's "8x400G NICs per node" / "4 x 200 Gb/s IB" / "RoCE 400G" / "GB200 NVL72" becomes
TuneRequest fields, then Cluster fields (agent.space.LayoutSpace, the tools' job inputs, the search), and the
collective model's per-GPU scale-out bandwidth (NICs x rate x efficiency / GPUs per node).  Not said:
the catalog's values, and exactly the same numbers as a cluster without overrides.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agent.text.request import TuneRequest, network_fields, parse_request
from agent.space import LayoutSpace
from agent.tool import call_tool
from projection.engine import project
from projection.hardware import load_hardware
from projection.legality import layout_violations, tp_span
from projection.model_spec import load_model
from projection.training_config import Cluster, TrainingConfig
from projtune.cli import app

# Llama 3 70B, TP8 inside each node and DP 32 across 32 nodes with a small batch: the gradient
# all-reduce over the NICs is the largest step term (bottleneck dp_comm).
DP_BOUND = TrainingConfig(tp=8, pp=1, zero=1, mbs=1, gbs=32, seq_len=4096, sequence_parallel=True)
JOB_TEXT = "tune llama3 70b on 256 h100, gbs 32"


def _project(request: TuneRequest, config: TrainingConfig = DP_BOUND) -> float:
    job = LayoutSpace(request)
    return project(job.model, job.cluster, config).iteration_time_s


@pytest.mark.parametrize(("text", "nics", "gbps"), [
    ("8x400G NICs per node", 8, 400.0),
    ("4 x 200 Gb/s IB", 4, 200.0),
    ("RoCE 400G", None, 400.0),
    ("8 NICs per node at 200 Gbps", 8, 200.0),
])
def test_nic_phrases_are_read(text: str, nics: int | None, gbps: float) -> None:
    request = parse_request(f"{JOB_TEXT}, {text}")
    assert isinstance(request, TuneRequest)
    assert (request.nics_per_node, request.nic_gbps) == (nics, gbps)
    assert request.num_gpus == 256 and request.gbs == 32       # the NIC numbers are not GPU counts or batches


@pytest.mark.parametrize(("text", "count", "domain"), [
    ("tune llama3 70b on 144 GB200 NVL72", 144, 72),
    ("tune llama3 70b on 144 gb200 in a 72-GPU NVLink domain", 144, 72),
    ("tune llama3 70b on 144 gb200, NVLink domain of 36", 144, 36),
    ("tune llama3 70b on 144 gb200", 144, None),
])
def test_nvlink_domain_phrases_are_read_and_are_not_gpu_counts(text: str, count: int, domain: int | None) -> None:
    request = parse_request(text)
    assert isinstance(request, TuneRequest)
    assert (request.num_gpus, request.nvlink_domain, request.gpus_per_node) == (count, domain, 4)


def test_parsed_nic_speed_reaches_the_cluster_and_moves_a_dp_bound_projection() -> None:
    plain = parse_request(JOB_TEXT)
    full = parse_request(f"{JOB_TEXT}, 8x400G NICs per node")
    half = parse_request(f"{JOB_TEXT}, 8x200G NICs per node")
    assert isinstance(plain, TuneRequest) and isinstance(full, TuneRequest) and isinstance(half, TuneRequest)
    assert network_fields(plain) == {} and LayoutSpace(plain).cluster.nic_gbps is None
    cluster = LayoutSpace(half).cluster
    assert (cluster.nics_per_node, cluster.nic_gbps) == (8, 200.0)
    hardware = load_hardware("h100-sxm")
    assert cluster.scale_out_gbit_per_gpu(hardware) == 200.0 and LayoutSpace(plain).cluster.scale_out_gbit_per_gpu(
        hardware) == 400.0
    job = LayoutSpace(plain)
    base = project(job.model, job.cluster, DP_BOUND)
    assert base.breakdown.bottleneck == "dp_comm"
    # not given: the catalog's network, bit-identical to a cluster built without the fields
    untouched = project(job.model, Cluster(gpu="h100-sxm", num_gpus=256, gpus_per_node=8), DP_BOUND)
    assert base.iteration_time_s == untouched.iteration_time_s == _project(full)   # 8 x 400G is the catalog's
    assert _project(half) > base.iteration_time_s * 1.3                            # half the NIC rate: slower
    fewer = parse_request(f"{JOB_TEXT}, 4x400G NICs per node")
    assert isinstance(fewer, TuneRequest) and _project(fewer) == pytest.approx(_project(half))


def test_nvl72_lets_tp_span_trays_and_a_given_domain_wins() -> None:
    request = parse_request("tune llama3 70b on 72 GB200 NVL72")
    assert isinstance(request, TuneRequest)
    assert request.nvlink_domain == 72 and request.gpus_per_node == 4
    job = LayoutSpace(request)
    assert job.cluster.nvlink_domain == 72 and tp_span(job.hardware, job.cluster) == 72
    tp8 = TrainingConfig(tp=8, pp=1, gbs=72, seq_len=4096, sequence_parallel=True)
    assert layout_violations(job.model, job.hardware, Cluster(gpu="gb200", num_gpus=72, gpus_per_node=4), tp8) == []
    nvl4 = Cluster(gpu="gb200", num_gpus=72, gpus_per_node=4, nvlink_domain=4)
    assert any("4-GPU NVLink domain" in r or "gpus_per_node=4" in r
               for r in layout_violations(job.model, job.hardware, nvl4, tp8))
    h100 = load_hardware("h100-sxm")
    model = load_model("llama3-70b")
    tp16 = TrainingConfig(tp=16, pp=1, gbs=64, seq_len=4096, sequence_parallel=True)
    assert any("gpus_per_node=8" in r for r in layout_violations(model, h100, Cluster(gpu="h100-sxm", num_gpus=64),
                                                                   tp16))
    # a 256-GPU NVLink Switch system of H100s: DP inside the domain, no NIC traffic, so faster
    plain = project(model, Cluster(gpu="h100-sxm", num_gpus=256), DP_BOUND).iteration_time_s
    assert project(model, Cluster(gpu="h100-sxm", num_gpus=256, nvlink_domain=256), DP_BOUND).iteration_time_s < plain


def test_tools_and_the_search_carry_the_network() -> None:
    job = {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 256, "layout": DP_BOUND.model_dump(mode="json")}
    plain, slow = call_tool("project", job), call_tool("project", {**job, "nic_gbps": 200})
    assert plain["ok"] and slow["ok"]
    assert slow["result"]["iteration_time_s"] > plain["result"]["iteration_time_s"]
    same = call_tool("project", {**job, "nics_per_node": 8, "nic_gbps": 400, "nvlink_domain": 8})
    assert same["result"]["iteration_time_s"] == plain["result"]["iteration_time_s"]
    bad = call_tool("project", {**job, "nic_gbps": -1})
    assert not bad["ok"] and bad["error"]["field"] == "nic_gbps"
    axes = call_tool("legal_axes", {"model": "llama3-70b", "gpu": "gb200", "num_gpus": 72, "gpus_per_node": 4})
    assert 8 in axes["result"]["tp"] and any("NVLink domain" in n for n in axes["result"]["notes"])
    search = {"model": "llama3-70b", "gpu": "h100-sxm", "num_gpus": 256, "gbs": 32, "seq_len": 4096, "top_k": 1,
              "constraints": {"tp": 8, "pp": 1, "precision": "bf16", "recompute": "none", "zero": 1, "cp": 1,
                              "mbs": 1}}
    fast, slow_search = call_tool("search", search), call_tool("search", {**search, "nic_gbps": 100})
    assert fast["ok"] and slow_search["ok"]
    assert (slow_search["result"]["ranked"][0]["tokens_per_sec_per_gpu"]
            < fast["result"]["ranked"][0]["tokens_per_sec_per_gpu"])


def test_tune_tool_and_cli_state_the_network_they_assumed() -> None:
    out = call_tool("tune", {"request": "tune llama3 8b on 16 h100, gbs 64, 4 x 200 Gb/s IB", "max_rounds": 1})
    assert out["ok"], out
    line = next(a for a in out["result"]["report"]["assumptions"] if a.startswith("scale-out network"))
    assert "4 NICs x 200 Gbit/s per node (as said)" in line and "100 Gbit/s per GPU" in line
    catalog = call_tool("tune", {"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 16, "gbs": 64, "max_rounds": 1,
                                 "nvlink_domain": 8})
    line = next(a for a in catalog["result"]["report"]["assumptions"] if a.startswith("scale-out network"))
    assert "h100-sxm catalog" in line and "NVLink domain 8 GPUs (as said)" in line
    runner = CliRunner()
    args = ["search", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "256", "--gbs", "32", "--seq-len",
            "4096", "--top", "1", "--json", "-C", "tp=8", "-C", "pp=1", "-C", "precision=bf16", "-C", "zero=1"]
    fast = runner.invoke(app, args)
    slow = runner.invoke(app, [*args, "--nics", "4", "--nic-gbps", "200"])
    assert fast.exit_code == 0 and slow.exit_code == 0, slow.output
    best = [json.loads(r.stdout)["ranked"][0]["tokens_per_sec_per_gpu"] for r in (fast, slow)]
    assert best[1] < best[0]
    tuned = runner.invoke(app, ["tune", "tune llama3 8b on 16 h100, gbs 64", "--offline", "--json", "--rounds", "1",
                                "--nic-gbps", "100"])
    assert tuned.exit_code == 0, tuned.output
    report = json.loads(tuned.stdout)
    assert report["request"]["nic_gbps"] == 100
    assert any("x 100 Gbit/s per node" in a for a in report["assumptions"])


@pytest.mark.parametrize(("text", "tokens", "days"), [
    ("train on 15T tokens in 30 days", 1.5e13, 30.0),
    ("with a 300B-token budget", 3e11, None),
    ("within 2 weeks", None, 14.0),
    ("1M tokens per step", None, None),        # a batch, not a budget
])
def test_token_budget_and_deadline_are_read_and_planned(text: str, tokens: float | None, days: float | None) -> None:
    request = parse_request(f"tune llama3 8b on 16 h100, gbs 64, {text}")
    assert isinstance(request, TuneRequest)
    assert (request.train_tokens, request.deadline_days) == (tokens, days)
    assert request.num_gpus == 16
    if tokens and days:
        out = call_tool("tune", {"request": f"tune llama3 8b on 16 h100, gbs 64, {text}", "max_rounds": 1})
        plan = out["result"]["report"]["plan"]
        assert plan["tokens"] == tokens and plan["deadline_days"] == days and "min_gpus" in plan
