"""The SEAL core: labels, traces, Psi, profiles, Omega and its cue wrapper, weights and the closed loop.

Nothing here imports verl or an environment; verl reaches the core through ``seal_verl.verl_glue`` and each
environment through ``env_wrappers``.
"""
