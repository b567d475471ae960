"""``python scripts/reproduce.py [overrides]`` in a checkout: the same command as
``scheda-reproduce`` (scheda/protocol/reproduce.py)."""

from scheda.protocol.reproduce import main

if __name__ == "__main__":
    main()
