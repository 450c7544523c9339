"""The report's tables: the paper's Table 1 (accuracy per category and overall, one row per method) and Table 3
(ablations against full SEAL) from several runs, and the cue effect of each run's last probe."""

from __future__ import annotations

from collections import defaultdict

from .report_load import Run

#: Column order and headings of the paper's tables.
CATEGORY_COLUMNS = (("multi_turn_base", "Base"), ("multi_turn_miss_func", "Miss Func"),
                    ("multi_turn_miss_param", "Miss Param"), ("multi_turn_long_context", "Long Context"))
ABLATION_ORDER = ("SEAL", "SEAL w/o env side", "SEAL w/o reweighting", "SEAL w/o closed loop", "GRPO")



def table1_rows(runs: list[Run]) -> list[list[str]]:
    """Rows ``[method, base, miss func, miss param, long context, overall]`` in percent (Table 1 form)."""
    rows = []
    for run in runs:
        acc = run.accuracy()
        cells = [f"{100 * acc[c]:.2f}" if c in acc else "-" for c, _ in CATEGORY_COLUMNS]
        present = [acc[c] for c, _ in CATEGORY_COLUMNS if c in acc]
        overall = f"{100 * sum(present) / len(present):.2f}" if present else "-"
        if present and len(present) < len(CATEGORY_COLUMNS):
            overall += "*"
        rows.append([method_label(run)] + cells + [overall])
    return rows


def method_label(run: Run) -> str:
    return f"{run.name} ({run.variant})" if run.variant and run.variant != run.name else run.name


def overall_accuracy(run: Run) -> float | None:
    acc = run.accuracy()
    vals = [acc[c] for c, _ in CATEGORY_COLUMNS if c in acc]
    return sum(vals) / len(vals) if vals else None


def table3_rows(runs: list[Run]) -> list[list[str]]:
    """Ablation rows ``[variant, overall, delta vs SEAL]`` (Table 3 form); empty without a full SEAL run."""
    training = [r for r in runs if r.kind == "training" and overall_accuracy(r) is not None]
    full = next((r for r in training if r.variant == "SEAL"), None)
    if full is None or len(training) < 2:
        return []
    base = overall_accuracy(full)
    order = {v: i for i, v in enumerate(ABLATION_ORDER)}
    rows = []
    for r in sorted(training, key=lambda r: order.get(r.variant, 99)):
        o = overall_accuracy(r)
        rows.append([method_label(r), f"{100 * o:.2f}", "-" if r is full else f"{100 * (o - base):+.2f}"])
    return rows


def format_text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


TABLE1_HEADER = ["Method"] + [h for _, h in CATEGORY_COLUMNS] + ["Overall"]
TABLE3_HEADER = ["Variant", "Overall", "vs SEAL"]


def cue_effects(run: Run) -> dict[str, list[tuple[int, dict]]]:
    """Per key (``all`` and each cue kind): ``(step, effect)`` of every step that ran the cue-effect probe."""
    out: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for r in run.steps:
        probe = r.get("cue_effect")
        effects = probe.get("effects") if isinstance(probe, dict) else None
        if not isinstance(effects, dict):
            continue
        for key, e in effects.items():
            if isinstance(e, dict) and all(isinstance(e.get(f), (int, float)) for f in ("diff", "lo", "hi")):
                out[key].append((int(r["step"]), e))
    return dict(out)


def cue_effect_rows(runs: list[Run]) -> list[list[str]]:
    """``[run, key, probes, last effect [interval], with, without]``: the last probe of each key of each run."""
    rows = []
    for run in runs:
        for key, series in sorted(cue_effects(run).items(), key=lambda kv: (kv[0] != "all", kv[0])):
            step, e = series[-1]
            rows.append([run.name, key, str(len(series)), f"{e['diff']:+.2f} [{e['lo']:+.2f}, {e['hi']:+.2f}] (step {step})",
                         _share(e.get("with")), _share(e.get("without"))])
    return rows


def _share(value) -> str:
    return "-" if value is None else f"{float(value):.2f}"


CUE_EFFECT_HEADER = ["run", "cue", "probes", "last effect [interval]", "reward with", "reward without"]
