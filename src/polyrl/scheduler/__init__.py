"""Scheduler: priorities, sliced long jobs, classified retries, durable state."""
