"""Installed as the package ``scheda.configs`` (see pyproject.toml): Hydra finds the presets here."""
