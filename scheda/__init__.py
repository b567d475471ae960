"""scheda: denoising and scheduled denoising autoencoders (Geras & Sutton, ICLR 2015)."""

# The one place of the version: pyproject.toml reads it (dynamic), CITATION.cff and CHANGELOG.md
# name it (tests/test_packaging.py checks they agree).
__version__ = "0.1.0"
