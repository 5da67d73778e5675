"""Domains: tasks with verifiable rewards behind one interface, and their registry."""
