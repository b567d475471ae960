"""Python imports this module at the start of every interpreter whose PYTHONPATH names this folder
(helpers.FAULTY_WORKERS): a sweep's joblib workers, fresh interpreters the sweep starts, then run
their jobs with the faults faulty_train injects (``SCHEDA_FAULT_*``), as a forked command does."""

import os
import sys

if any("loky" in arg for arg in sys.orig_argv) and any(k.startswith("SCHEDA_FAULT_") for k in os.environ):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/reliability
    from faulty_train import inject_faults

    inject_faults()
