"""Run tooling: the run folder a training run leaves, and the commands that watch, check and report it."""
