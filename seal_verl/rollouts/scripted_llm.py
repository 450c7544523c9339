"""A scripted stand-in for verl's LLM server client: token ids of planned assistant messages."""

from __future__ import annotations

from typing import Optional

from .environments import CLOSING_TEXT, environment
from .plans import Plan


class ScriptedLLM:
    """Stands in for verl's ``LLMServerClient``: ``await generate(request_id, prompt_ids=..., sampling_params=...)``
    returns a ``TokenOutput`` with the token ids of the scripted text (tiny tokenizer) plus ``<|im_end|>``,
    cut to ``sampling_params["max_tokens"]`` like a real server.

    Plans are queued per task (:meth:`queue`); each new request of a task takes the next plan of its queue
    (or ``default`` when the queue is empty). ``records`` keeps, per request, the plan and the texts sent.

    ``tasks`` maps each task id to its task object (any object the environment's ``load_task`` returns). The task
    of a request is the part of the request id before its last ``/`` (the agent loops send
    ``"<task_id>/<uuid hex>"``), so a task id may itself contain ``/``.
    """

    def __init__(self, tokenizer, tasks: dict, default=None, eos_token: str = "<|im_end|>",
                 env: Optional[str] = None, chooser=None):
        self.tokenizer = tokenizer
        self.tasks = tasks
        self.env = env
        self._turn_texts: dict[str, list[str]] = {}
        self.default = default  # callable task -> Plan
        #: callable (task, first prompt text) -> Plan or None, asked first for each new request: a policy
        #: whose choice depends on what the prompt says (the cue-reading policy of the dry run)
        self.chooser = chooser
        self.eos_id = tokenizer.convert_tokens_to_ids(eos_token)
        self._queues: dict[str, list[Plan]] = {}
        self._req: dict[str, dict] = {}
        self.records: list[dict] = []
        self.calls = 0
        self.global_steps = 0

    def queue(self, task_id: str, plans: list[Plan]) -> None:
        self._queues.setdefault(task_id, []).extend(plans)

    def reset(self) -> None:
        self._queues.clear()
        self._req.clear()
        self.records.clear()

    def _turn_of(self, task_id: str, task, prompt_text: str) -> int:
        texts = self._turn_texts.get(task_id)
        if texts is None:
            texts = self._turn_texts[task_id] = environment(self.env).user_turn_texts(task)
        pos, turn = 0, -1
        for k, text in enumerate(texts):
            found = prompt_text.find(text, pos)
            if found < 0:
                break
            pos, turn = found + len(text), k
        return max(turn, 0)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from seal_verl.verl_glue.in_process import token_output

        self.calls += 1
        task_id = str(request_id).rsplit("/", 1)[0]
        if task_id not in self.tasks:
            raise KeyError(f"scripted LLM: request {request_id!r} is for task {task_id!r}, which it was not given")
        task = self.tasks[task_id]
        st = self._req.get(request_id)
        prompt_text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        if st is None:
            q = self._queues.get(task_id)
            plan = self.chooser(task, prompt_text) if self.chooser is not None else None
            if plan is None:
                plan = q.pop(0) if q else (self.default(task) if self.default else None)
            elif q:
                q.pop(0)  # the queued plan this request would have taken is used up all the same
            if plan is None:
                raise RuntimeError(f"no scripted plan for task {task_id}")
            st = {"plan": plan, "turn": -1, "step": 0, "texts": [], "ids": [], "turns": [], "max_tokens": []}
            self._req[request_id] = st
            self.records.append({"request_id": request_id, "task_id": task_id, "plan": plan, "texts": st["texts"],
                                 "ids": st["ids"], "turns": st["turns"], "max_tokens": st["max_tokens"]})
        turn = self._turn_of(task_id, task, prompt_text)
        if turn != st["turn"]:
            st["turn"], st["step"] = turn, 0
        msgs = st["plan"].messages[turn] if turn < len(st["plan"].messages) else []
        text = msgs[st["step"]] if st["step"] < len(msgs) else CLOSING_TEXT
        st["step"] += 1
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]
        limit = sampling_params.get("max_tokens")
        if limit is not None:
            ids = ids[: int(limit)]
        st["texts"].append(text)
        st["ids"].append(list(ids))
        st["turns"].append(turn)
        st["max_tokens"].append(limit)
        return token_output(ids, [-0.5] * len(ids) if sampling_params.get("logprobs") else None, self.global_steps)

    def record_for(self, trace: dict) -> Optional[dict]:
        """The request whose sent messages are exactly the attempts of ``trace`` (same task).

        Compared as decoded tokens (what the agent loop saw), so a message cut by a token budget still matches.
        """
        texts = [a["text"] for t in trace["turns"] for a in t["attempts"]]
        for rec in self.records:
            if rec["task_id"] != trace["task_id"] or len(rec["ids"]) != len(texts):
                continue
            sent = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in rec["ids"]]
            if sent == texts:
                return rec
        return None
