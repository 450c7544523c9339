"""Import-time activation of the CPU platform (a no-op unless ``SEAL_CPU_PLATFORM`` is set).

For launching without the project's ``verl.plugins`` entry point::

    SEAL_CPU_PLATFORM=1 VERL_USE_EXTERNAL_MODULES=seal_cpu_platform.verl_plugin python -m verl.trainer.main_ppo ...

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` at ``import verl`` (in the driver, in every Ray
worker and in vLLM processes that import verl), before any of its trainer or worker modules, and, unlike entry
points, lets their errors propagate. It may also serve as a ``verl.plugins`` entry point target of its own.
"""

from seal_cpu_platform import activate_if_requested

activate_if_requested()
