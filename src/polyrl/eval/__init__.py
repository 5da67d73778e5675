"""Eval: per-domain scores with intervals, headroom, and the run report."""
