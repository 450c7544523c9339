"""seal-verl: SEAL (failure diagnosis driving both the training interface and the GRPO weights) for verl."""

__version__ = "0.1.0"
