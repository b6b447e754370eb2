"""When to log, evaluate and save: decided here, in optimizer steps, and nowhere else.

(vit_jax's ``checkpoint_every`` only worked as an on/off switch because its loop did its own
``step % x``; big_vision's ``itstime`` is the model followed here.)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import TrainConfig, parse_duration
from ..errors import ConfigError


@dataclass(frozen=True)
class Cadence:
    total_steps: int
    steps_per_epoch: int
    log_every: int
    eval_every: int
    save_every: int
    warmup_steps: int = 0

    @classmethod
    def from_config(cls, cfg: TrainConfig, steps_per_epoch: int, warmup: str = "0st") -> Cadence:
        """``steps_per_epoch`` counts optimizer steps (micro-batches / accum_steps)."""
        batch = cfg.batch_size * cfg.accum_steps

        def steps(text: str) -> int:
            return parse_duration(text, steps_per_epoch=steps_per_epoch, batch_size=batch)

        total = steps(cfg.duration)
        if total < 1:
            raise ConfigError(f"train.duration={cfg.duration!r} is less than one optimizer step")
        warmup_steps = steps(warmup)
        if warmup_steps >= total:
            raise ConfigError(
                f"optim.warmup={warmup!r} ({warmup_steps} steps) is not shorter than "
                f"train.duration={cfg.duration!r} ({total} steps): the schedule would never decay"
            )
        return cls(
            total,
            steps_per_epoch,
            steps(cfg.log_every),
            steps(cfg.eval_every),
            steps(cfg.save_every),
            warmup_steps,
        )

    @staticmethod
    def _due(step: int, every: int, total: int) -> bool:
        """After optimizer step ``step`` (1-based): every ``every`` steps, and at the end."""
        return step == total or (every > 0 and step % every == 0)

    def log(self, step: int) -> bool:
        return self._due(step, self.log_every, self.total_steps)

    def eval(self, step: int) -> bool:
        return self._due(step, self.eval_every, self.total_steps)

    def save(self, step: int) -> bool:
        return self._due(step, self.save_every, self.total_steps)
