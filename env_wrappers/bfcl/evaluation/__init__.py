"""BFCL evaluation: ``seal-verl eval`` against an OpenAI-compatible server (:mod:`.runner`, its settings in
:mod:`.config`, the HTTP client in :mod:`.openai_http`, the scoring in :mod:`.scoring`), ``bfcl generate``
result files (:mod:`.result_files`), and the result-file subcommands of the command line (:mod:`.commands`).

It builds on the environment room (episodes, tasks, the judge); neither the environment nor the sandbox imports
it. Its subcommands reach the command line through the registered ``bfcl`` (``env_wrappers.bfcl.registered``).
"""
