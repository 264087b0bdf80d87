"""The LLM's request parse carries every field the offline parser reads, and none the user did not state.

Against the scripted OpenAI-compatible server on loopback (tests/agent/fake_openai_server.py): the
offline parser asks back (the model is named loosely), the LLM answers the parse prompt with JSON, and
:func:`agent.text.prompts_text.parse_reply` keeps what the text states (agent/text/grounding.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fake_openai_server import FakeOpenAIServer, reply

from agent.llm_config import LLMConfig
from agent.policies.llm import LLMPolicy
from agent.text.request import Clarification, TuneRequest, parse_request

FULL = {"model": "mixtral-8x22b", "gpu": "mi300x", "num_gpus": 64, "seq_len": 8192, "batch_tokens": 1048576,
        "finetune": "lora", "framework": "torchtitan", "nics_per_node": 8, "nic_gbps": 400, "nvlink_domain": 8,
        "train_tokens": 1.5e13, "deadline_days": 14, "constraints": ["headroom>=0.2", "precision=bf16"]}


def _parse(fast_llm: Callable[..., LLMConfig], text: str, answer: dict[str, object]) -> TuneRequest:
    assert isinstance(parse_request(text), Clarification), "the offline parser must ask back for the LLM to run"
    with FakeOpenAIServer([reply(json.dumps(answer))]) as server:
        request = LLMPolicy(fast_llm(server.url)).parse(text)
        assert len(server.requests) == 1
    assert isinstance(request, TuneRequest)
    return request


def test_llm_parse_carries_every_field_the_offline_parser_reads(fast_llm: Callable[..., LLMConfig]) -> None:
    text = ("LoRA on the big mistral MoE, sixty-four MI300X with torchtitan, 1M tokens per step, seq 8k, "
            "8x400G NICs per node, NVLink domain of 8, bf16 only, must fit with 20% headroom, "
            "train on 15T tokens within 2 weeks")
    request = _parse(fast_llm, text, FULL)
    assert (request.model, request.gpu, request.num_gpus, request.seq_len) == ("mixtral-8x22b", "mi300x", 64, 8192)
    assert request.batch_tokens == 1048576 and request.gbs == 128             # 1M tokens / 8k
    assert (request.finetune, request.framework) == ("lora", "torchtitan")
    assert (request.nics_per_node, request.nic_gbps, request.nvlink_domain) == (8, 400.0, 8)
    assert sorted(request.constraints) == ["headroom>=0.2", "precision=bf16"]
    assert (request.train_tokens, request.deadline_days) == (1.5e13, 14.0)
    assert not any(n.startswith("ignored what the LLM read") for n in request.notes)
    # the same fields the offline parser reads when it can resolve the model name itself
    offline = parse_request(text.replace("the big mistral MoE", "mixtral 8x22b").replace("sixty-four", "64"))
    assert isinstance(offline, TuneRequest)
    same = ("batch_tokens", "gbs", "seq_len", "finetune", "framework", "nics_per_node", "nic_gbps", "nvlink_domain",
            "train_tokens", "deadline_days")
    assert {k: getattr(request, k) for k in same} == {k: getattr(offline, k) for k in same}
    assert sorted(offline.constraints) == sorted(request.constraints)


def test_llm_may_not_add_fields_the_user_did_not_state(fast_llm: Callable[..., LLMConfig]) -> None:
    text = "tune the big mistral MoE on sixty-four MI300X, seq 8k"
    request = _parse(fast_llm, text, {**FULL, "nvlink_domain": 72, "constraints": ["headroom>=0.2", "tp<=2"]})
    assert request.seq_len == 8192                                            # said
    assert request.batch_tokens is None and request.gbs == 512   # default 4M tokens / 8k, not the LLM's 1M tokens
    assert request.finetune is None and request.framework is None
    assert (request.nics_per_node, request.nic_gbps, request.nvlink_domain) == (None, None, None)
    assert (request.train_tokens, request.deadline_days) == (None, None)
    assert request.constraints == []
    note = next(n for n in request.notes if n.startswith("ignored what the LLM read"))
    for invented in ("batch_tokens=1048576", "finetune=lora", "framework=torchtitan", "nics_per_node=8",
                     "nic_gbps=400", "nvlink_domain=72", "train_tokens=", "deadline_days=14", "headroom>=0.2",
                     "tp<=2"):
        assert invented in note
    assert "framework" in request.assumed                                     # the default is said, not hidden


def test_a_number_elsewhere_in_the_text_does_not_ground_a_nic_field(fast_llm: Callable[..., LLMConfig]) -> None:
    # '8' is written (seq 8k) but not next to a NIC word, '400' nowhere: both NIC fields are dropped
    text = "tune the big mistral MoE on sixty-four MI300X, seq 8k, SFT"
    request = _parse(fast_llm, text, {**FULL, "finetune": "sft", "framework": None, "batch_tokens": None,
                                      "nvlink_domain": None, "constraints": []})
    assert request.finetune == "sft"
    assert request.nics_per_node is None and request.nic_gbps is None


def test_an_llm_tool_call_cannot_change_the_network() -> None:
    from agent.toolbox import Toolbox

    request = parse_request("tune llama3 70b on 256 h100, gbs 32")
    assert isinstance(request, TuneRequest)
    layout = {"tp": 8, "pp": 1, "zero": 1, "mbs": 1, "gbs": 32, "seq_len": 4096, "sequence_parallel": True,
              "precision": "bf16"}
    tools = Toolbox.for_request(request)
    honest = tools.call_from_model("project", {"layout": layout})
    sneaky = tools.call_from_model("project", {"layout": layout, "nic_gbps": 50, "nics_per_node": 1,
                                               "nvlink_domain": 256})
    assert honest["ok"] and sneaky["ok"]
    assert sneaky["result"]["iteration_time_s"] == honest["result"]["iteration_time_s"]
    given = Toolbox.for_request(request.model_copy(update={"nic_gbps": 200.0}))
    slower = given.call_from_model("project", {"layout": layout, "nic_gbps": 800})
    assert slower["result"]["iteration_time_s"] > honest["result"]["iteration_time_s"]   # the user's 200G holds


def test_invalid_llm_field_values_are_named_not_lost() -> None:
    """A field the LLM filled with the wrong type or out of range is listed as ignored, not silently dropped."""
    import json

    from agent.text.prompts_text import parse_reply
    from agent.text.request import parse_request

    text = "tune llama3 8b on 16 h100, 8x400G NICs per node"
    offline = parse_request(text)
    reply = json.dumps({"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 16,
                        "nics_per_node": "eight", "nic_gbps": 400, "nvlink_domain": 100000})
    request = parse_reply(reply, None, offline, text=text)
    noted = " ".join(request.notes)
    assert "nics_per_node='eight' (not a valid value)" in noted and "nvlink_domain=100000 (not a valid value)" in noted
    assert request.nic_gbps == 400


def test_llm_parse_keeps_packed_documents_only_when_stated(fast_llm: Callable[..., LLMConfig]) -> None:
    answer = {**FULL, "framework": None, "batch_tokens": None, "nics_per_node": None, "nic_gbps": None,
              "nvlink_domain": None, "train_tokens": None, "deadline_days": None, "constraints": [],
              "packed_document_tokens": 256}
    said = _parse(fast_llm, "LoRA on the big mistral MoE, sixty-four MI300X, seq 8k, packed 256-token documents",
                  answer)
    assert (said.finetune, said.packed_document_tokens) == ("lora", 256)
    unsaid = _parse(fast_llm, "LoRA on the big mistral MoE, sixty-four MI300X, seq 8k", answer)
    assert unsaid.packed_document_tokens is None
    assert "packed_document_tokens=256" in next(n for n in unsaid.notes if n.startswith("ignored what the LLM read"))
