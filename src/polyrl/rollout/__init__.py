"""Rollout: policies behind one interface and multi-turn agent episodes."""
