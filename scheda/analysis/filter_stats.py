"""A number for the paper's words about filters (its Figures 3-4: a DA at low noise learns noisier,
more local filters; at high noise smoother, more global ones; ScheDA a mix): the share of a filter's
energy at high spatial frequencies, per unit, so that records keep a measurement and not only a
picture.

A filter is a row of W drawn in the image's shape; each channel's mean is removed (a flat colour is
not detail), its 2-D power spectrum taken, and the share of the power at a radial frequency above
``cutoff`` of the Nyquist frequency is its high-frequency share: near 0 for a smooth blob, about
0.8 for white noise at the default cutoff (the share of the spectrum's area beyond half of Nyquist),
1 for a checkerboard.
"""

from __future__ import annotations

import numpy as np

CUTOFF = 0.5  # of the Nyquist frequency; fixed before any block of table=paper_settings ran


def high_frequency_share(W, image_shape: tuple[int, int, int], cutoff: float = CUTOFF) -> np.ndarray:
    """Per row of ``W`` ([units, C*H*W], channels first as CIFAR-10's arrays), the share of its
    spectral power above ``cutoff`` x Nyquist (radially); a row with no power (all one value per
    channel) counts 0."""
    if not 0 < cutoff < 1:
        raise ValueError(f"cutoff={cutoff}: a share of the Nyquist frequency in (0, 1)")
    c, h, w = image_shape
    x = np.asarray(W.detach().float().cpu() if hasattr(W, "detach") else W, dtype=np.float64).reshape(-1, c, h, w)
    x = x - x.mean(axis=(2, 3), keepdims=True)
    power = (np.abs(np.fft.fft2(x, axes=(2, 3))) ** 2).sum(axis=1)  # [units, h, w], channels summed
    fy, fx = np.meshgrid(np.fft.fftfreq(h), np.fft.fftfreq(w), indexing="ij")  # cycles per pixel, Nyquist 0.5
    high = np.sqrt(fy ** 2 + fx ** 2) > cutoff * 0.5
    total = power.sum(axis=(1, 2))
    return np.where(total > 0, power[:, high].sum(axis=1) / np.where(total > 0, total, 1.0), 0.0)


MAX_PNG_BYTES = 100_000  # what a block's record may keep of one model's filters


def filter_png(W, image_shape: tuple[int, int, int], n: int = 36, max_bytes: int = MAX_PNG_BYTES) -> bytes:
    """The first ``n`` filters of ``W`` tiled as a PNG (scheda.loggers' grid: each filter scaled to its
    own range), fewer (the next smaller square) until it fits ``max_bytes``: a record stays small."""
    import io

    from PIL import Image

    from scheda.loggers.base import filter_grid

    while True:
        grid = filter_grid(W[:n], image_shape)
        buffer = io.BytesIO()
        Image.fromarray((255 * grid.clip(0, 1)).round().astype(np.uint8).squeeze()).save(buffer, format="PNG",
                                                                                          optimize=True)
        data = buffer.getvalue()
        if len(data) <= max_bytes or n <= 1:
            return data
        n = (int(np.sqrt(n)) - 1) ** 2
