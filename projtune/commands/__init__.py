"""One module per CLI command group; each exposes functions that cli.py registers."""
