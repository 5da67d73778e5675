"""Models: building tiny models from configs and loading hub/local models."""
