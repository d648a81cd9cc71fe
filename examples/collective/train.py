"""Data-parallel training with real PaddlePaddle (CPU, gloo), started by paddle-launcher.

Every rank fits y = 3*x1 - 2*x2 + 1 on its OWN random data, so the ranks' parameters stay
identical only if the gradients are really all-reduced. Writes result-<rank>.json into the
directory given as the first argument (default: the current directory).

    paddle-launcher local --trainers 3 --job-name demo --protocol collective \
        -- python examples/collective/train.py /tmp/out

Recovery: with a second argument, a directory every pod shares, rank 0 checkpoints the
parameters after each step (written whole, then renamed: a kill never leaves half a file), and
every start that finds a checkpoint there resumes from it instead of step 0, whatever
PADDLE_LAUNCHER_RESTART_COUNT says: a job restarted whole (by its batch system, or after
Kueue preempted it) must not overwrite its progress from step 1. STEP_SECONDS (default 0) slows each step down, so that a test can kill a pod mid-training.

Preemption: the launcher sends PADDLE_LAUNCHER_CHECKPOINT_SIGNAL (SIGUSR1 by default) to every
trainer of the job when one of its pods is told to stop. The handler only notes it; at the end
of the step every rank learns whether any rank was asked (an all-reduce), so all checkpoint
after the same step, then train on until the launcher stops them. CHECKPOINT_EVERY (default 1)
is how many steps apart the regular checkpoints are; 0: only when asked.

Progress: as each step begins every rank writes the step number to
PADDLE_LAUNCHER_PROGRESS_FILE (when the launcher gives one), so that --hang-timeout judges the
training loop, not the log, and a rank that never began the step the others block in is named.
HANG_RANK and HANG_AT_STEP inject a hang for tests: in the first run of the job (restart count
0) that rank stops before that step's all-reduce, and every other rank blocks in it.

Stragglers: the progress line also says how long the rank's own work of its last step took
(`<step> compute_ms=<ms>`: its data and forward pass, before the all-reduce, where every rank
waits for the slowest), so that the launcher names a rank that is slow before it becomes a hang
(docs/observability.md). STEP_SECONDS stands for that work; SLOW_RANK's takes SLOW_SECONDS more
(a slow GPU, a slow data loader). STEPS (default 40) is how many steps the job trains.

QUIET_RANKS=1 makes the program behave as most do (PaddleNLP's, for one): only local rank 0
(PADDLE_LOCAL_RANK) prints and writes the progress file; the pod's other ranks say nothing.
"""
import json
import os
import signal
import sys
import time

import numpy as np
import paddle
import paddle.distributed as dist


def main():
    quiet = os.environ.get("QUIET_RANKS") == "1" and os.environ.get("PADDLE_LOCAL_RANK", "0") != "0"

    def say(line):
        if not quiet:
            print(line, flush=True)

    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    say(f"rank {rank} of world {world}")

    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(256, 2)).astype("float32")
    y = (x @ np.array([[3.0], [-2.0]], dtype="float32") + 1.0).astype("float32")
    x, y = paddle.to_tensor(x), paddle.to_tensor(y)

    paddle.seed(rank)  # different initial weights: DataParallel must broadcast rank 0's
    layer = paddle.nn.Linear(2, 1)
    checkpoint_dir = sys.argv[2] if len(sys.argv) > 2 else None
    restart = int(os.environ.get("PADDLE_LAUNCHER_RESTART_COUNT", "0"))
    start = 0
    if checkpoint_dir:
        start = resume(layer, checkpoint_dir)
        if start > 0:
            say(f"rank {rank}: restart {restart}, resuming after step {start}")
    model = paddle.DataParallel(layer)
    optimizer = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
    progress = None if quiet else os.environ.get("PADDLE_LAUNCHER_PROGRESS_FILE")
    hang_rank = os.environ.get("HANG_RANK")
    hang_at = int(os.environ.get("HANG_AT_STEP", "0"))
    every = int(os.environ.get("CHECKPOINT_EVERY", "1"))
    asked = [False]
    asked_by = os.environ.get("PADDLE_LAUNCHER_CHECKPOINT_SIGNAL")
    if checkpoint_dir and asked_by:
        # Only noted here: a handler runs between two bytecodes, maybe mid-step.
        signal.signal(getattr(signal, asked_by), lambda *_: asked.__setitem__(0, True))
    checkpointed_on_signal = []
    losses = []
    steps = int(os.environ.get("STEPS", "40"))
    own_work = step_seconds
    if os.environ.get("SLOW_RANK") == str(rank):
        own_work += float(os.environ.get("SLOW_SECONDS", "0"))
    compute_ms = None
    for step in range(start + 1, steps + 1):
        if restart == 0 and hang_rank == str(rank) and step == hang_at:
            say(f"rank {rank}: hanging before step {step} (HANG_RANK)")
            while True:
                time.sleep(3600)
        # Written as the step begins, before its all-reduce: a rank that never reaches it is
        # the one behind, which the launcher names when the job hangs.
        if progress:
            with open(progress, "w") as f:
                timed = "" if compute_ms is None else f" compute_ms={compute_ms}"
                f.write(f"{step}{timed}\n")
        began = time.monotonic()
        time.sleep(own_work)
        predicted = model(x)
        compute_ms = int((time.monotonic() - began) * 1000)
        loss = paddle.nn.functional.mse_loss(predicted, y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
        if checkpoint_dir:
            # Every rank learns whether any was asked, so that all checkpoint after one step.
            flag = paddle.to_tensor([1.0 if asked[0] else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            on_signal = float(flag.numpy()[0]) > 0
            if on_signal:
                asked[0] = False
                checkpointed_on_signal.append(step)
                say(f"rank {rank}: checkpoint after step {step} (asked by {asked_by})")
            if on_signal or (every and step % every == 0):
                # The ranks' parameters are equal (all-reduced): rank 0's are the job's.
                if rank == 0:
                    save(layer, step, checkpoint_dir)
        say(f"rank {rank}: step {step} loss {losses[-1]:.6f}")

    result = {
        "restart_count": restart,
        "resumed_after_step": start,
        "checkpointed_on_signal": checkpointed_on_signal,
        "rank": rank,
        "world": world,
        "env_trainer_id": int(os.environ["PADDLE_TRAINER_ID"]),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "params": [p.numpy().tolist() for p in model.parameters()],
    }
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as f:
        json.dump(result, f)
    say(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")


def save(layer, step, directory):
    state = {"step": step, "params": {k: v.numpy().tolist() for k, v in layer.state_dict().items()}}
    path = os.path.join(directory, "checkpoint.json")
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def resume(layer, directory):
    """Loads the last checkpoint into the layer; the step it was taken after (0: none)."""
    path = os.path.join(directory, "checkpoint.json")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        state = json.load(f)
    layer.set_state_dict(
        {k: paddle.to_tensor(np.array(v, dtype="float32")) for k, v in state["params"].items()}
    )
    return state["step"]


if __name__ == "__main__":
    main()
