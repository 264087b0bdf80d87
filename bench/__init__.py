"""Measured mode: time real layers on 1-8 local GPUs and restore the target layout analytically.

The flow follows Primus Projection (shared/notes/primus-projection.md 2.1-2.2):
:mod:`bench.reduction` shrinks the target layout to the local GPUs, :mod:`bench.layers`
and :mod:`bench.collectives` time one layer per kind and the TP/EP collectives,
:mod:`bench.measurement` stores the result, and :mod:`bench.restore` feeds restored
per-layer costs to :func:`projection.engine.project`. :mod:`bench.device` fits a device
profile to GEMM, attention and copy microbenchmarks.
"""
