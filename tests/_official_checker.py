"""Run bfcl-eval's official multi-turn checker on decoded trajectories, in its own process.

Not a test module (pytest does not collect it): ``tests/bfcl/test_agreement.py`` starts it with
``python tests/_official_checker.py`` and ``BFCL_PROJECT_ROOT`` pointing at a temporary folder.

The official checker executes call strings with ``eval()`` and caches backend instances in the module
globals of ``multi_turn_utils``, keyed by model name + task id, for ever. So:

- it runs only here, never inside the test process;
- every call string is first checked to be a plain call with literal arguments (the inputs are our own
  generated perturbations of BFCL's ground truth, so this never refuses anything; it is a safety belt);
- every check gets a fresh model name, so the global cache can never hand back a mutated instance, and the
  instances a check created are dropped from the globals after it.

Protocol: one JSON object per stdin line ``{"key": str, "task_id": str, "decoded": [turn][step][call]}``;
one JSON object per stdout line, in the same order,
``{"key": str, "valid": bool, "error_type": str | null, "refused": str | null, "exception": str | null}``.
Tasks and ground truth are read with bfcl-eval's own loaders, independently of the project's code.
"""

from __future__ import annotations

import ast
import json
import os
import sys


#: Bare identifiers allowed among the arguments: what ``repr`` writes for non-finite floats. Looking them up
#: in BFCL's module globals fails with a NameError (nothing named so exists there), which is the behaviour
#: the agreement test compares.
_FLOAT_NAMES = frozenset({"nan", "inf"})


def _literal_node(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _FLOAT_NAMES
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(node.operand, ast.Name):
        return node.operand.id in _FLOAT_NAMES
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_literal_node(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal_node(k) for k in node.keys) and all(_literal_node(v) for v in node.values)
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _literal_call(text: str) -> bool:
    """True when ``text`` is ``name(<literals>)``: a bare function name and literal arguments only."""
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return False
    if any(kw.arg is None for kw in node.keywords):
        return False
    return all(_literal_node(v) for v in list(node.args) + [kw.value for kw in node.keywords])


def _check_input(decoded) -> str | None:
    if not isinstance(decoded, list):
        return "decoded is not a list"
    for turn in decoded:
        if not isinstance(turn, list):
            return "a turn is not a list"
        for step in turn:
            if not isinstance(step, list) or not step:
                return "a step is not a non-empty list"
            for call in step:
                if not isinstance(call, str) or not _literal_call(call):
                    return f"not a literal-only call: {str(call)[:120]!r}"
    return None


def main() -> int:
    if not os.environ.get("BFCL_PROJECT_ROOT"):
        print("BFCL_PROJECT_ROOT must be set (a temporary folder)", file=sys.stderr)
        return 2
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    categories = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
    entries, truths = {}, {}
    for cat in categories:
        entries.update({e["id"]: e for e in load_dataset_entry(cat)})
        truths.update({g["id"]: g["ground_truth"] for g in load_ground_truth_entry(cat)})

    cache = vars(multi_turn_utils)
    prefix = f"sealagree{os.getpid()}n"
    out = sys.stdout
    for n, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        req = json.loads(line)
        reply = {"key": req.get("key"), "valid": None, "error_type": None, "refused": None, "exception": None}
        task_id = req.get("task_id")
        refused = _check_input(req.get("decoded")) if task_id in entries else f"unknown task id {task_id!r}"
        if refused:
            reply["refused"] = refused
        else:
            model_name = f"{prefix}{n}"  # unique per check: the global instance cache never returns stale state
            try:
                verdict = multi_turn_checker(req["decoded"], truths[task_id], entries[task_id],
                                             task_id.rsplit("_", 1)[0], model_name)
                reply["valid"] = bool(verdict["valid"])
                reply["error_type"] = verdict.get("error_type")
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
                reply["exception"] = f"{type(exc).__name__}: {exc}"[:500]
            finally:
                for key in [k for k in cache if k.startswith(model_name + "_")]:
                    del cache[key]
        out.write(json.dumps(reply) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
