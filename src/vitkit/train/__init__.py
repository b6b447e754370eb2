"""Training: the one loop, objectives, optimizers and schedules, cadence, checkpoints."""
