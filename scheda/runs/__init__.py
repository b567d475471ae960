"""Runs and their results, without torch: results.json and the run directory, re-entry of a directory that already holds a run, resume=, gathering runs into tables."""
