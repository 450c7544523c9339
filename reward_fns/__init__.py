"""verl reward functions of seal-verl.

- ``bfcl_reward.compute_score``: BFCL multi-turn, graded from the rollout trace (verifier + Psi labels +
  profile). Point verl at it with ``reward.custom_reward_function.path`` = the file path (or
  ``pkg://reward_fns.bfcl_reward``) and ``reward.custom_reward_function.name=compute_score``.

Nothing is imported here: verl loads the module by path, and importing it loads the BFCL task data.
"""
