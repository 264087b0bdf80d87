"""OpenAI function schemas: valid JSON Schema (Draft 2020-12), and each round-trips its pydantic input model."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tools.openai_schema import openai_tools, parameters_schema
from tools.registry import TOOLS, registered


def example(schema: dict[str, Any]) -> Any:
    """A value that satisfies ``schema``: defaults where given, else the first choice or a minimal value."""
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return example(options[0])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        required = set(schema.get("required", []))
        return {name: example(sub) for name, sub in schema.get("properties", {}).items()
                if name in required or "default" in sub}
    if kind == "array":
        return [example(schema.get("items", {"type": "string"}))
                for _ in range(max(1, schema.get("minItems", 1)))]
    if kind == "integer":
        return max(1, schema.get("minimum", 1))
    if kind == "number":
        return schema.get("minimum", 0.5)
    if kind == "boolean":
        return False
    return "llama3-8b"


def test_schema_shape() -> None:
    tools = openai_tools()
    assert [t["function"]["name"] for t in tools] == [t.name for t in registered()]
    for t in tools:
        assert t["type"] == "function"
        function = t["function"]
        assert set(function) == {"name", "description", "parameters"}
        assert function["parameters"]["type"] == "object"
        assert "$ref" not in str(function["parameters"]) and "$defs" not in function["parameters"]


@pytest.mark.parametrize("tool", registered(), ids=lambda t: t.name)
def test_schema_is_valid_json_schema_and_round_trips(tool: Any) -> None:
    schema = parameters_schema(tool.input_model)
    Draft202012Validator.check_schema(schema)
    value = example(schema)
    Draft202012Validator(schema).validate(value)
    model = tool.input_model.model_validate(value)
    again = model.model_dump(mode="json", exclude_unset=True)
    Draft202012Validator(schema).validate(again)
    assert tool.input_model.model_validate(again) == model


def test_schema_rejects_what_the_model_rejects() -> None:
    schema = parameters_schema(next(t for t in TOOLS if t.name == "project").input_model)
    validator = Draft202012Validator(schema)
    assert not validator.is_valid({"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8, "layout": {}, "x": 1})
    assert not validator.is_valid({"model": "llama3-8b", "gpu": "h100-sxm", "num_gpus": 8,
                                   "layout": {"precision": "bf32"}})
