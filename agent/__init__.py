"""The tuning agent: a LangGraph graph that proposes, projects, ranks and explains training layouts.

Entry points: :func:`agent.run.tune` (one request to a :class:`agent.report.TuneReport`),
:func:`agent.graph.build_graph` (the graph itself), :mod:`agent.text.session` (chat sessions) and
:func:`agent.evaluate.choose` (the evals hook).
"""
