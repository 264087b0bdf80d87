"""Reading and writing natural language around the graph core: request parsing (numbers, names, constraints),
chat follow-ups, replies and sessions, prompt texts, and the checks on an LLM's text (grounded numbers, plain
text).  The react-agent core (state, graph, nodes, routing, policies, report) lives in :mod:`agent` and calls
these; nothing here builds or runs the graph."""
