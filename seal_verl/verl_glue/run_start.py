"""What a training run records in its run folder when it starts (or resumes): ``config.json`` (what runs: the
variant, the ``seal`` section, the whole resolved verl config) and ``provenance.json`` (what produced it:
``seal_verl.verl_glue.provenance``). One writer for the V1 trainers and the legacy trainer. No verl import.
"""

from __future__ import annotations

from typing import Any, Optional

from seal_verl.verl_glue import provenance


def resolved(cfg: Any) -> Any:
    """The config as plain containers, resolved where it resolves."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation: keep the unresolved form
        return OmegaConf.to_container(cfg, resolve=False)


def trainer_name(cfg: Any) -> str:
    """The path that runs ``cfg``: verl's V1 trainer and its mode, or the legacy trainer."""
    trainer = cfg.trainer
    if not bool(trainer.get("use_v1", True)):
        return "verl main_ppo, legacy RayPPOTrainer (trainer.use_v1=false)"
    return f"verl main_ppo, trainer.v1.trainer_mode={trainer.v1.get('trainer_mode')}"


def record_start(driver: Any, cfg: Any, *, resumed_from: Optional[str], global_steps: int,
                 faults: tuple = ()) -> None:
    """Write ``config.json`` and ``provenance.json`` into the driver's run folder (nothing without one).

    Args:
        driver: the run's ``SealDriver`` (its validated ``seal`` section and run folder).
        cfg: verl's whole trainer config.
        resumed_from: the checkpoint folder the run resumed from (None: a fresh start).
        global_steps: verl's step counter after loading the checkpoint (the resumed step).
        faults: faults planted on purpose (``SEAL_FAULT``).
    """
    folder = driver.run_folder
    if folder is None:
        return
    recipe = cfg.get("recipe") or {}
    name = trainer_name(cfg)
    folder.write_config({
        "trainer": name,
        "variant": recipe.get("variant") if hasattr(recipe, "get") else None,
        "preset": recipe.get("preset") if hasattr(recipe, "get") else None,
        "model": cfg.actor_rollout_ref.model.path,
        "seal": driver.cfg.to_dict(),
        "resumed_from": resumed_from,
        "resumed_from_step": int(global_steps) if resumed_from else None,
        "faults": list(faults),
        "verl": resolved(cfg),
    })
    provenance.write(folder.path, cfg, trainer=name)
