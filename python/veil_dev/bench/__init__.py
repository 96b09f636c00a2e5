"""Benchmarks that compare Veil side by side with its baselines."""
