"""verl glue of seal-verl: the only package of the project that imports verl.

- ``plugin``: the ``verl.plugins`` entry point (registration of the estimator, trainer, wrappers, loops);
- ``config``: the ``seal:`` config section and its consistency with verl's settings;
- ``advantage``: the ``seal_grpo`` estimator and the reward extras it is fed from;
- ``driver``: the per-step SEAL work on the trainer driver (weights, closed loop, persistence);
- ``trainer``: the V1 trainer ``trainer.v1.trainer_mode=seal``;
- ``legacy``: wrappers for the legacy trainer (``trainer.use_v1=false``);
- ``state_actor``: the Ray named actor that shares the closed-loop state with the rollout workers.

Import ``seal_verl.verl_glue.plugin`` only through verl's entry point or by this exact name.
"""
