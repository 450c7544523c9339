"""Models the runs train: backbones, the tiny CPU models, warm starts and the shipped copies."""
