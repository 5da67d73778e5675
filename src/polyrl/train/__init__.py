"""Train: GRPO-family losses, the trainer loop, curriculum, replay, checkpoints."""
