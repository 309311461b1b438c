"""Training the routers that learn: data, labels, fitting, calibration.

    reward_data.py  `hybridbench reward-data`: the reward model's preference pairs (seed §2.1.2)
    reward.py       `hybridbench train-reward`, `calibrate-reward` (seed §2.1.3, §3)
    labels.py       CITER's token-level labels (reference shortcut, rollouts, label-free)
    citer.py        `hybridbench train-citer`: labels -> MLP -> tau, two rounds
    query.py        `hybridbench train-query`: the query-level router

What they share lives in `common.py` (the train/calib split-and-check, the provenance every
checkpoint records, `cost.jsonl`: each invocation's wall time and tokens generated, written by
the CLI for every training command) and in `Engine.generate_each` (decoding many prompts, batched by `--batch`,
with a progress bar).
Training data come from a task's `train` split only, thresholds from `calib`; the runner refuses
to evaluate a router on the ids it was trained or calibrated on.
"""
