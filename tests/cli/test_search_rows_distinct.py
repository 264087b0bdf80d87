"""`projtune search` rows that differ only in bracketed text (selective modules, an uneven pipeline split) stay
distinct: the layout is escaped for Rich (its markup ate '[core_attn+layernorm]' and '[first 3, last 2]', so two
rows looked identical), and the reason names the difference."""

from __future__ import annotations

from typer.testing import CliRunner

from projtune.cli import app

runner = CliRunner()


def test_selective_module_sets_are_shown() -> None:
    args = ["search", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--gbs", "512", "--seq-len", "8192",
            *[x for c in ("recompute=selective", "tp=2", "pp=1", "precision=bf16", "zero=1", "mbs=1")
              for x in ("--constraint", c)]]
    result = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "rc=selective[core_attn+layernorm]" in result.output
    assert "differs from #1 in nothing" not in result.output
    assert "recompute_modules" in result.output
