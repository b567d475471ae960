"""``python train.py [overrides]`` in a checkout: the same command as ``scheda-train``
(scheda/cli.py), kept because users know it."""

from scheda.cli import main

if __name__ == "__main__":
    main()
