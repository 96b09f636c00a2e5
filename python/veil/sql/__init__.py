"""Veil's SQL query path: parse and qualify, split planner, RemoteSQL rendering."""
