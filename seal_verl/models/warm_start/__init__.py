"""Warm starts of the CPU recipes: the tiny local Qwen2 fine-tuned on rollouts rendered by verl's own agent loop
until it is partly right, so that GRPO groups have reward variance from the first step.

This subpackage runs verl (reached through ``seal_verl.verl_glue``, as the dry run reaches it) and imports
transformers and torch; it is used by the CPU recipes (``recipes/bfcl_v3/cpu``, ``recipes/ledger_cpu``) and their
tests, never by the plugin or the SEAL core, which stay free of it. Its modules:

- :mod:`~seal_verl.models.warm_start.pipeline`: the one pipeline every warm start runs: rows rendered under cue states by
  the real agent loop (scripted plans: the ground truth, or failing plans with their expected labels),
  fine-tuning, the sampler and pass rates, the cache (fingerprint, ``warm_start.json``), the console tables and
  the command line;
- :mod:`~seal_verl.models.warm_start.run_config`: the lengths, sampling and agent-loop file of the run a warm start
  prepares for, read from that run's composed config;
- :mod:`~seal_verl.models.warm_start.bfcl_cpu`: the BFCL CPU run's warm start (``python -m seal_verl.models.warm_start.bfcl_cpu``);
- :mod:`~seal_verl.models.warm_start.ledger`, :mod:`~seal_verl.models.warm_start.ledger_mix`,
  :mod:`~seal_verl.models.warm_start.ledger_stages`: the ledger benchmark's supervised stages, its mixed stage, and the
  list of stages with the behaviour the last one should leave.
"""
