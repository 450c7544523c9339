"""The sandbox: model-issued tool calls run in a worker process that can be killed, so that a time limit
really holds.

A backend call runs Python code of BFCL's classes on arguments the model chose. Big-integer and decimal
arithmetic (``power(base=10, exponent=30000000)``, ``square_root(precision=30000000)``) holds the
interpreter lock for minutes: a thread cannot be stopped, and while it runs every other thread of the
process stalls. Some backends also set process-wide state (``logarithm`` sets ``mpmath.mp.dps``), so two
rollouts calling at the same time in one process can change each other's results.

:class:`.client.IsolatedBackends` therefore keeps the backend instances of one rollout in a worker process of its
own. The parent only waits on a pipe (releasing the lock), so other threads never stall:

- **time limit**: each call gets ``call_timeout_s`` from its start; a call over it gets BFCL's kind of
  error text, the worker is killed, and a fresh worker rebuilds the rollout's state by replaying the calls
  that completed before it (the backends are deterministic: per-instance seeded generators). That replay is
  bounded as a whole by ``call_timeout_s`` too, so a call never takes more than about twice its limit. The
  rollout keeps its tools, and the overrunning call leaves no trace in the state. Only when that replay
  itself fails (or overruns) are the rollout's tools closed, with an error text that says so. The verifier,
  which replays the model's calls, skips a call recorded as timed out in the same way, and does its replay
  in a worker of this pool too (a ``job`` request: the judge side, ``environment.isolated_verify``, names the
  function the worker runs, so the sandbox itself knows nothing of verdicts): no model call runs in the
  judging process.
- **a worker that died**: a worker that ended at any moment (during a call, or idle between two calls of its
  rollout: killed by the system, out of memory) is replaced the same way, with the completed calls replayed,
  so the rollout's later observations are those of an undisturbed run. A call that was running when its
  worker ended gets an error text that says so; a call the worker never received simply runs on the new one.
- **memory limit**: the worker's address space is capped (``resource.RLIMIT_AS``) so a call that builds a
  huge value fails with ``MemoryError`` (an error result) instead of exhausting the host.
- **result size**: a result text over ``backends.MAX_RESULT_CHARS`` characters becomes an error result that
  says so (the call still ran); the long text never leaves the worker.
- **no shared settings**: a worker serves one rollout at a time. Workers are kept warm in a pool and reused;
  between rollouts a worker drops its instances, frees their memory (a cyclic garbage collection, then the
  allocator's free pages back to the system) and resets the process-wide arithmetic settings BFCL's backends
  change (mpmath's precision and the decimal context).
- **clean workers only**: a released worker goes back to the pool only if it reset in time and its memory
  is back near what it started with (at most ``limits.IDLE_WORKER_MAX_MB`` and a quarter of its cap above it,
  in address space and in private memory); otherwise it is stopped. The idle workers together may hold at
  most ``limits.IDLE_POOL_BUDGET_MB`` above their start (the oldest are stopped first) and number at most
  ``limits.MAX_IDLE_WORKERS``.

A reply that cannot be read (it does not unpickle, has the wrong shape or was cut off) counts as the
worker's end (:class:`.worker.WorkerDied`); a reply that does not come in time raises
:class:`.worker.WorkerTimeout`, and callers tell the two apart by type, never by message text. Each of these
ways out can be injected deterministically in tests (``faults``).

Workers are forked from the rollout process after it has imported the backend modules, so a new worker
costs a fork, not an interpreter start, and shares the process's hash seed (set orders in result texts).

The modules, from the bottom up: :mod:`.faults` (fault injection points), :mod:`.memory` (what a process maps
and holds, and the allocator's free pages), :mod:`.worker` (the worker process's loop and the parent's handle
on one worker, with the typed ways a request fails), :mod:`.limits` (how many workers a process runs, what a
kept worker may hold, the sandbox's settings), :mod:`.slots` (which rollouts may hold a worker now),
:mod:`.resets` (the threads that reset released workers), :mod:`.judges` (the judgement workers), :mod:`.pool`
(warm workers, leased and kept) and :mod:`.client` (:class:`~.client.IsolatedBackends`, one rollout's backends
behind a worker). The sandbox runs BFCL's backend classes (``env_wrappers.bfcl.tools``) and imports nothing from
the environment room: the environment's episode, verifier and judge import the sandbox.
"""
