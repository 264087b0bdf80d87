"""Typed tools over the projection engine: layout search, launch configs, and one registry of LLM-callable tools.

The registry (:mod:`tools.registry`) is the single source for the adapters: LangChain tools
(:mod:`tools.langchain_tools`), OpenAI function schemas (:mod:`tools.openai_schema`) and the
MCP server (:mod:`tools.mcp_server`).  Import the submodules directly; this package keeps
its import light so the CLI starts fast.
"""
