"""Embedded configs (``quickstart.yaml`` is what ``polyrl run`` runs by default)."""
