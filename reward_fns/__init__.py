"""verl reward functions of seal-verl.

- ``seal_reward.compute_score``: any registered tool environment, graded from the rollout trace (the
  environment's verifier + Psi labels + profile). Point verl at it with ``reward.custom_reward_function.path``
  = the file path (or ``pkg://reward_fns.seal_reward``) and ``reward.custom_reward_function.name=compute_score``.
- ``bfcl_reward.compute_score``: the same, with BFCL as the environment of rows that name none.

Nothing is imported here: verl loads the modules by path, and an environment loads its task data on first use.
"""
