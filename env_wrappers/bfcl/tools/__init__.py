"""BFCL's tools: the backend classes of bfcl-eval by name (:mod:`.classes`), the safe parsing of a call's text
(:mod:`.calls`) and per-rollout instances that run decoded calls on them (:mod:`.backends`).

The bottom room of ``env_wrappers.bfcl``: the sandbox (which runs these in worker processes) and the environment
(the episode, the verifier, the judge) import it; it imports neither of them.
"""
