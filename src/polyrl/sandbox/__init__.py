"""Isolated, limited, recorded execution of model-written code and shell (see issue: Sandbox)."""
