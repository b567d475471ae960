"""scheda: denoising and scheduled denoising autoencoders (Geras & Sutton, ICLR 2015)."""

__version__ = "0.1.0"
