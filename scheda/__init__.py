"""scheda: denoising and scheduled denoising autoencoders (Geras & Sutton, ICLR 2015)."""

# The one place of the version: pyproject.toml reads it (dynamic), CITATION.cff and CHANGELOG.md
# name it (tests/test_packaging.py checks they agree).
__version__ = "0.2.0"

__all__ = ["Run", "load", "train", "train_stack", "__version__"]

def __getattr__(name: str):
    """``scheda.train``, ``scheda.train_stack``, ``scheda.load`` and ``scheda.Run`` (scheda/api.py),
    imported on first use."""
    if name in ("Run", "load", "train", "train_stack"):
        from scheda import api

        return getattr(api, name)
    raise AttributeError(f"module 'scheda' has no attribute {name!r}")
