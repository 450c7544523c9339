"""The BFCL environment: tasks and the SEAL split, the episode (:class:`.env.BFCLEnv`), prompts, the verifier
and the judge (verifier + Psi), and what prepares a run (verl data rows, preflight checks, prompt lengths,
scripted trajectories and perturbations).

The environment registry's ``bfcl`` is :class:`.environment.BFCLEnvironment` with the evaluation's subcommands
added (``env_wrappers.bfcl.registered``); this room imports nothing of the evaluation. The model's calls run in the
sandbox (``env_wrappers.bfcl.sandbox``), whose workers this room's episode and judge lease; the calls are decoded
and run by the tools room (``env_wrappers.bfcl.tools``), which imports neither this room nor the sandbox.
"""
