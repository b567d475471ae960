"""``python train.py`` with faults injected, for the kill/resume tests.

Environment:
  SCHEDA_FAULT_EPOCH_SLEEP=S   sleep S seconds after every epoch (so a kill lands mid-run);
  SCHEDA_FAULT_HANG_WRITE=NAME while writing the checkpoint file NAME, after its bytes are in
                               the temporary file, create NAME.hanging beside it and hang.
  SCHEDA_FAULT_USR2_HANDLER=F  a scheduler's SIGUSR2 handler, as submitit installs one: it
                               writes the checkpoints that exist under the working directory
                               to F, then exits with status 3 (submitit requeues and exits).
"""

import os
import runpy
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import scheda.checkpoint  # noqa: E402
import scheda.trainer  # noqa: E402

sleep = float(os.environ.get("SCHEDA_FAULT_EPOCH_SLEEP", "0"))
hang = os.environ.get("SCHEDA_FAULT_HANG_WRITE")

if sleep:
    run_epoch = scheda.trainer.Lockstep.run_epoch

    def slow_epoch(self, active):
        run_epoch(self, active)
        time.sleep(sleep)

    scheda.trainer.Lockstep.run_epoch = slow_epoch

if hang:
    atomic_write = scheda.checkpoint.atomic_write

    def hanging_write(path, write):
        def write_then_hang(f):
            write(f)
            if Path(path).name == hang:
                f.flush()
                Path(str(path) + ".hanging").touch()
                time.sleep(600)

        return atomic_write(path, write_then_hang)

    scheda.checkpoint.atomic_write = hanging_write

usr2 = os.environ.get("SCHEDA_FAULT_USR2_HANDLER")
if usr2:
    import signal

    def scheduler(signum, frame):
        Path(usr2).write_text("\n".join(sorted(p.name for p in Path.cwd().glob("**/checkpoints/*.pt"))))
        os._exit(3)

    signal.signal(signal.SIGUSR2, scheduler)

sys.argv = [str(REPO / "train.py"), *sys.argv[1:]]
runpy.run_path(str(REPO / "train.py"), run_name="__main__")
