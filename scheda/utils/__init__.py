"""The plumbing every layer stands on: errors, atomic writes, locks, forks, signals, progress bars, seeds, devices, the environment a run records, statistics."""
