"""BFCL V3 multi-turn as a SEAL environment, on bfcl-eval's real backends, in four rooms:

- ``tools``: bfcl-eval's backend classes by name, the safe parsing of a call and the backends that run calls;
- ``sandbox``: the worker processes the model's calls run in (worker, limits, slots, resets, judges, pool,
  client, memory probes, faults);
- ``environment``: tasks, the episode, prompts, data preparation, the verifier and the judge
  (``environment.environment:BFCLEnvironment``), and its subcommands that prepare a run;
- ``evaluation``: ``seal-verl eval`` (client, result files, runner, scoring) and the result-file subcommands.

Each room imports only the rooms listed before it: the sandbox imports the tools, the environment's episode and
judge import the sandbox, the evaluation builds on the environment and the sandbox; the environment imports nothing
of the evaluation. ``registered`` joins them: the registry's ``bfcl`` is its ``BFCL``, the environment serving the
subcommands of both rooms. None of them imports the command line (``seal_verl.cli``).

bfcl-eval writes result and score folders under ``BFCL_PROJECT_ROOT`` at import time and falls back to its
own site-packages folder when the variable is unset. Importing this package points it at a per-user cache
folder first (an explicit setting wins), so nothing is written into site-packages.
"""

import os
from pathlib import Path

if not os.environ.get("BFCL_PROJECT_ROOT"):
    _root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seal-verl" / "bfcl"
    _root.mkdir(parents=True, exist_ok=True)
    os.environ["BFCL_PROJECT_ROOT"] = str(_root)
