"""The run folders a report reads, as :class:`Run` objects: training and dry-run folders through
``seal_verl.runs.folder`` (damaged rows skipped with a warning), evaluation folders (``scores.json``,
``labels.jsonl``). Reads files only: no verl, no BFCL import."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from dataclasses import dataclass, field


from . import folder as RF


class ReportError(Exception):
    """A run folder that cannot be read (one line naming the folder or file)."""


@dataclass
class Run:
    name: str
    path: str
    kind: str  # "training" or "eval"
    variant: str = ""
    steps: list = field(default_factory=list)            # metrics.jsonl rows
    weights: dict = field(default_factory=dict)          # step -> [w]
    validation: dict = field(default_factory=dict)       # validation step -> {category: [n, n_valid]}
    eval_scores: dict | None = None
    eval_labels: list = field(default_factory=list)      # labels.jsonl rows
    warnings: list = field(default_factory=list)         # rows or files skipped as damaged
    notes: list = field(default_factory=list)            # what a reader must know: fault injection, retired kinds

    def accuracy(self) -> dict[str, float]:
        """Per-category accuracy the tables report: the eval scores, else the last validation."""
        if self.eval_scores:
            return {c: float(v["accuracy"]) for c, v in self.eval_scores.get("categories", {}).items()}
        if self.validation:
            last = self.validation[max(self.validation)]
            return {c: nv / n for c, (n, nv) in last.items() if n}
        return {}

    def source(self) -> str:
        if self.eval_scores:
            p = self.eval_scores.get("protocol", {})
            return (f"seal-verl eval, {p.get('mode')} mode ({p.get('call_format')}), split {p.get('split')}, "
                    f"temperature {p.get('temperature')}, {sum(v['n'] for v in self.eval_scores['categories'].values())} task(s)")
        if self.validation:
            last = self.validation[max(self.validation)]
            return f"validation at step {max(self.validation)} ({sum(n for n, _ in last.values())} rollouts, bfcl loop)"
        return "no accuracy recorded"


def _rows(rows_and_damage: tuple[list, list], warnings: list, strict: bool = True) -> list[dict]:
    """Rows read by ``run_folder``; damaged lines become warnings, or (``strict``) an error when nothing else is
    readable. Not strict for the files of which the report reads a part (one step's rollouts, the validation):
    one of ten thousand trace files lost to a disk error costs its weights, not the report."""
    rows, damage = rows_and_damage
    bad = [d for d in damage if not d.cut]
    if strict and bad and not rows:
        raise ReportError(str(bad[0]))
    warnings += [f"skipped {d}" for d in damage]
    return rows


def _read_json(path: str) -> dict:
    obj, damage = RF.read_object(path)
    if damage is not None:
        raise ReportError(str(damage))
    return obj or {}


def _notes(config: dict, steps: list[dict]) -> list[str]:
    """What the page must say beside the numbers: fault injection the run ran with, the cue kinds the probe
    retired (and when), settings beyond the paper under ``preset=paper``."""
    from seal_verl.core.settings import SealSettings, paper_departures

    settings = config.get(RF.FAULT_SETTINGS)
    faults = dict(settings) if isinstance(settings, dict) else {}
    planted = config.get("faults")  # the V1 trainer's list of the faults it planted
    if isinstance(planted, list) and planted:
        faults.setdefault("SEAL_FAULT", ",".join(map(str, planted)))
    retired = []
    for r in steps:
        if isinstance(r.get(RF.FAULT_SETTINGS), dict):
            faults.update(r[RF.FAULT_SETTINGS])
        probe = r.get("cue_effect")
        kinds = probe.get("retired") if isinstance(probe, dict) else None
        if isinstance(kinds, list) and kinds:
            retired.append(f"{', '.join(map(str, kinds))} at step {r.get('global_step', r.get('step'))}")
    out = [f"ran with fault injection on ({', '.join(f'{k}={v}' for k, v in sorted(faults.items()))}): its numbers "
           "are not a model's"] if faults else []
    if retired:
        out.append("the cue-effect probe retired " + "; ".join(retired) + " (off for the rest of the run)")
    try:
        out += paper_departures(SealSettings.from_dict(config.get("seal")), config.get("preset"))
    except ValueError:
        pass
    return out


def variant_name(config: dict) -> str:
    """SEAL, GRPO or an ablation, from the run's ``seal.switches`` (or its recipe's variant)."""
    seal = config.get("seal")
    sw = seal.get("switches") if isinstance(seal, dict) else None
    sw = sw if isinstance(sw, dict) else {}
    env, rw, loop = (bool(sw.get(k, True)) for k in ("env_side", "reweighting", "closed_loop"))
    recipe = str(config.get("variant") or "").lower()
    if recipe == "grpo" or (not env and not rw):
        return "GRPO"
    if not env:
        return "SEAL w/o env side"
    if not rw:
        return "SEAL w/o reweighting"
    if not loop:
        return "SEAL w/o closed loop"
    return "SEAL"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def category_of(task_id: str) -> str:
    return str(task_id).rsplit("_", 1)[0]


# ----------------------------------------------------------------------------------------- row checks
# A row that parses as JSON can still hold anything in any field (a hand-edited file, a row of another tool, a
# disk error inside a string). The plots and tables below read numbers, tables and lists; these checks make
# every row hold exactly that, leaving out what does not fit with one warning per row, so that one odd field
# costs that field, not the report.

#: step-row fields that hold one number, and those that hold a table of numbers
_STEP_NUMBERS = ("w_mean", "w_std", "w_min", "w_max", "success_rate", "cue_tokens_mean", "cue_tokens_max", "seconds")
_STEP_TABLES = ("prevalence", "prevalence_ema", "rate", "rate_ema", "rho", "rho_used", "metrics")


def _number(value) -> float | None:
    """``value`` as a finite float, or None when it is not a (finite) number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _table(value) -> tuple[dict, bool]:
    """The string-keyed finite numbers of ``value`` and whether anything else was in it."""
    if not isinstance(value, dict):
        return {}, True
    kept = {k: _number(v) for k, v in value.items() if isinstance(k, str) and _number(v) is not None}
    return kept, len(kept) != sum(1 for v in value.values() if v is not None)


def _probe(value) -> tuple[dict | None, bool]:
    """A step's cue-effect summary with only the effects whose difference and interval are numbers."""
    if not isinstance(value, dict):
        return None, True
    out, bad = dict(value), False
    if "confidence" in out and _number(out["confidence"]) is None:
        out.pop("confidence")
        bad = True
    effects = value.get("effects")
    kept = {}
    for key, e in (effects.items() if isinstance(effects, dict) else ()):
        cell = {f: _number(e.get(f)) for f in ("diff", "lo", "hi", "with", "without")} if isinstance(e, dict) else {}
        if not isinstance(key, str) or any(cell.get(f) is None for f in ("diff", "lo", "hi")):
            bad = True
            continue
        bad = bad or any(e.get(f) is not None and cell[f] is None for f in ("with", "without"))
        kept[key] = dict(e, **cell)
    out["effects"] = kept
    return out, bad or not isinstance(effects, dict) and effects is not None


def _clean_step(row: dict, where: str, warnings: list) -> dict:
    """``row`` (a step row with an integer ``step``) with every field of the wrong kind left out or emptied."""
    out, bad = dict(row), []
    for key in _STEP_NUMBERS:
        if row.get(key) is not None and _number(row[key]) is None:
            out[key] = None
            bad.append(key)
    out["metrics"] = {}  # every plot reads it
    for key in _STEP_TABLES:
        if row.get(key) is not None:
            out[key], wrong = _table(row[key])
            bad += [key] if wrong else []
    for key in ("active_during", "active_next"):
        v = row.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(k, str) for k in v)):
            out[key] = [k for k in v if isinstance(k, str)] if isinstance(v, list) else []
            bad.append(key)
    if "global_step" in row and not _is_int(row["global_step"]):
        out.pop("global_step")
        bad += [] if row["global_step"] is None else ["global_step"]
    if row.get("cue_effect") is not None:
        out["cue_effect"], wrong = _probe(row["cue_effect"])
        bad += ["cue_effect"] if wrong else []
    if bad:
        warnings.append(f"{where}: step {row['step']}: left out what is not of its kind in {', '.join(bad)}")
    return out


def _scores(scores: dict, where: str, warnings: list) -> dict:
    """``scores.json`` with only the categories whose accuracy is in [0, 1] and whose count is an integer."""
    cats = {}
    for c, v in scores["categories"].items():
        acc = _number(v.get("accuracy")) if isinstance(v, dict) else None
        n = v.get("n") if isinstance(v, dict) else None
        if isinstance(c, str) and acc is not None and 0.0 <= acc <= 1.0 and _is_int(n) and n >= 0:
            cats[c] = dict(v, accuracy=acc, n=n)
        else:
            warnings.append(f"skipped {where}: category {str(c)[:60]!r}: accuracy and n are not a share and a count")
    protocol = scores.get("protocol")
    return dict(scores, categories=cats, protocol=protocol if isinstance(protocol, dict) else {})


def _label_row(row: dict) -> dict:
    """A ``labels.jsonl`` row with a string category and id and a list of string labels."""
    labels = row.get("labels")
    return dict(row, labels=[x for x in labels if isinstance(x, str)] if isinstance(labels, list) else [],
                category=row.get("category") if isinstance(row.get("category"), str) else None,
                id=str(row.get("id", "")))


def load_run(path: str, name: str | None = None) -> Run:
    """Read one run folder (training, dry run or eval)."""
    if not os.path.isdir(path):
        raise ReportError(f"{path}: not a folder")
    if not os.access(path, os.R_OK | os.X_OK):
        raise ReportError(f"{path}: cannot read this folder (no permission)")
    name = name or os.path.basename(os.path.normpath(path))
    if os.path.exists(os.path.join(path, "scores.json")):
        scores = _read_json(os.path.join(path, "scores.json"))
        if not isinstance(scores.get("categories"), dict):
            raise ReportError(f"{os.path.join(path, 'scores.json')}: field 'categories' missing")
        run = Run(name=name, path=path, kind="eval")
        run.eval_scores = _scores(scores, os.path.join(path, "scores.json"), run.warnings)
        run.eval_labels = [_label_row(r) for r in _rows(RF.read_rows(os.path.join(path, "labels.jsonl")), run.warnings)]
        run.variant = str(run.eval_scores["protocol"].get("model") or "")
        return run
    if not any(os.path.exists(os.path.join(path, f)) for f in (RF.METRICS, RF.VALIDATION)):
        raise ReportError(f"{path}: neither a training run folder ({RF.METRICS}, {RF.VALIDATION}) "
                          "nor an eval folder (scores.json)")
    config = _read_json(os.path.join(path, RF.CONFIG))
    run = Run(name=name, path=path, kind="training", variant=variant_name(config))
    steps = _rows(RF.read_steps(path), run.warnings)
    back = RF.steps_going_back([r.get("global_step", r.get("step")) for r in steps])
    run.warnings += [back] if back else []
    run.notes += _notes(config, steps)
    files = RF.step_files(path)
    run.warnings += [f"cannot read {f} (no permission): left out" for kind in (files.states, files.probes, files.traces)
                     for f in kind.values() if not os.access(f, os.R_OK)]
    run.warnings += [f"skipped {os.path.join(path, RF.METRICS)}: a step row without a step number"
                     for r in steps if not _is_int(r.get("step"))]
    metrics_file = os.path.join(path, RF.METRICS)
    run.steps = sorted((_clean_step(r, metrics_file, run.warnings) for r in steps if _is_int(r.get("step"))),
                       key=lambda r: r["step"])
    for k in RF.step_files(path).traces:
        run.weights[k] = [w for w in (_number(r.get("w")) for r in _rows(RF.read_traces(path, k), run.warnings, strict=False))
                          if w is not None]
    last_step = max((r.get("global_step", r["step"] + 1) for r in run.steps), default=0)
    val: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    val_file = os.path.join(path, RF.VALIDATION)
    for r in _rows(RF.read_validation(path), run.warnings, strict=False):
        acc = r.get("acc") if r.get("acc") is not None else r.get("score")
        acc = float(acc) if isinstance(acc, bool) else 0.0 if acc is None else _number(acc)
        step = r.get("global_step")
        if acc is None or not (step is None or _is_int(step)):
            run.warnings.append(f"skipped {val_file}: a row of task {str(r.get('task_id'))[:60]!r} whose "
                                "score or global_step is not a number")
            continue
        cell = val[last_step if step is None else step][category_of(r.get("task_id", ""))]
        cell[0] += 1
        cell[1] += int(acc >= 1.0)
    run.validation = {s: dict(c) for s, c in sorted(val.items())}
    return run
