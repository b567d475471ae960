"""``python train.py [overrides]`` in a checkout: the same command as ``scheda-train``
(scheda/train.py), kept because users know it."""

from scheda.train import main

if __name__ == "__main__":
    main()
