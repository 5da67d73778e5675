"""polyrl: reinforcement-learning post-training of language models across many domains.

Packages, each importing only ``polyrl.types``/``polyrl.errors`` and those left of it:
``sandbox -> domains -> scheduler -> rollout -> train -> eval -> cli``.
"""

__version__ = "0.1.0"
