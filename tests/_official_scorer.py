"""Score ``bfcl generate``-layout result files with bfcl-eval's own decoders and multi-turn checker, in its own
process (not a test module; ``tests/eval/test_eval_client.py`` starts it).

What ``bfcl evaluate`` does per multi-turn entry, with bfcl-eval's own functions where the lean install can
import them:

- a result that is not a list: ``multi_turn:inference_error``; a turn count different from the ground
  truth: ``multi_turn:force_terminated``;
- every step decoded by the handler's ``decode_execute``: ``convert_to_function_call`` for function-calling
  steps (lists of ``{name: arguments}``; a text step fails to decode), ``default_decode_execute_prompting``
  for Python call lists, and the Qwen handler's reading of ``<tool_call>`` JSON blocks (re-stated here: the
  handler module imports an HTTP client stack the lean install lacks); a step that fails to decode or decodes
  to nothing is skipped;
- ``multi_turn_checker`` on the decoded turns.

``bfcl_eval.model_handler.utils`` imports Java/JavaScript parsers (tree-sitter) and a retry library at module
level that multi-turn decoding never uses; they are absent from the lean install and replaced here by inert
placeholder modules before the import. The checker uses ``eval()``: every decoded call string must pass the
literal-only check of ``_official_checker.py`` first, and each check gets a fresh model name.

Usage: ``python tests/_official_scorer.py FORMAT RESULT_FILE...`` (FORMAT: fc, json or python); prints one JSON
line per entry: ``{"id", "valid", "error_type", "refused", "exception"}``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import types


class _Inert(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        from unittest import mock
        return mock.MagicMock(name=f"{self.__name__}.{name}")


def _install_placeholders() -> None:
    import importlib.util

    for name in ("tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "tenacity"):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _Inert(name)


def main(argv: list[str]) -> int:
    if not os.environ.get("BFCL_PROJECT_ROOT"):
        print("BFCL_PROJECT_ROOT must be set (a temporary folder)", file=sys.stderr)
        return 2
    fmt, paths = argv[0], argv[1:]
    _install_placeholders()
    from _official_checker import _check_input

    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response
    from bfcl_eval.model_handler.utils import convert_to_function_call, default_decode_execute_prompting
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    def decode_qwen_json(text):
        calls = []
        for block in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL):
            try:
                calls.append(json.loads(block))
            except ValueError:
                continue
        if any(type(c) is not dict for c in calls):
            raise ValueError("not a list of function calls")
        return convert_to_function_call([{c["name"]: c["arguments"]} for c in calls])

    decoders = {"fc": convert_to_function_call, "python": default_decode_execute_prompting, "json": decode_qwen_json}
    decode = decoders[fmt]
    categories = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
    entries, truths = {}, {}
    for cat in categories:
        entries.update({e["id"]: e for e in load_dataset_entry(cat)})
        truths.update({g["id"]: g["ground_truth"] for g in load_ground_truth_entry(cat)})
    cache = vars(multi_turn_utils)
    n = 0
    for path in paths:
        with open(path) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        for obj in lines:
            n += 1
            tid, result = obj["id"], obj["result"]
            reply = {"id": tid, "valid": None, "error_type": None, "refused": None, "exception": None}
            gt = truths[tid]
            if not isinstance(result, list):
                reply.update(valid=False, error_type="multi_turn:inference_error")
            elif len(result) != len(gt):
                reply.update(valid=False, error_type="multi_turn:force_terminated")
            else:
                decoded = []
                for turn in result:
                    steps = []
                    for item in turn:
                        try:
                            d = decode(item)
                            if is_empty_execute_response(d):
                                continue
                            steps.append(d)
                        except Exception:  # noqa: BLE001 - bfcl evaluate skips what fails to decode
                            continue
                    decoded.append(steps)
                refused = _check_input(decoded)
                if refused:
                    reply["refused"] = refused
                else:
                    model_name = f"sealscore{os.getpid()}n{n}"
                    try:
                        v = multi_turn_checker(decoded, gt, entries[tid], tid.rsplit("_", 1)[0], model_name)
                        reply.update(valid=bool(v["valid"]), error_type=v.get("error_type"))
                    except Exception as exc:  # noqa: BLE001 - reported to the test
                        reply["exception"] = f"{type(exc).__name__}: {exc}"[:500]
                    finally:
                        for key in [k for k in cache if k.startswith(model_name + "_")]:
                            del cache[key]
            print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
