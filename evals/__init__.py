"""Evaluation against measured sweeps: loading, scoring, reports, calibration, log import."""
