"""Progress bars: throttled, on a terminal only (``disable=None`` turns a bar off when its
stream is not a TTY, as in Slurm logs and tests), printed below the log lines."""

from __future__ import annotations

from tqdm import tqdm


def bar(total: float, desc: str, unit: str, enabled: bool = True, **kwargs) -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, disable=None if enabled else True, mininterval=0.5,
                dynamic_ncols=True, **kwargs)
