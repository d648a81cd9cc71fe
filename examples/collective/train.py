"""Data-parallel training with real PaddlePaddle (CPU, gloo), started by paddle-launcher.

Every rank fits y = 3*x1 - 2*x2 + 1 on its OWN random data, so the ranks' parameters stay
identical only if the gradients are really all-reduced. Writes result-<rank>.json into the
directory given as the first argument (default: the current directory).

    paddle-launcher local --trainers 3 --job-name demo --protocol collective \
        -- python examples/collective/train.py /tmp/out
"""
import json
import os
import sys

import numpy as np
import paddle
import paddle.distributed as dist


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of world {world}", flush=True)

    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(256, 2)).astype("float32")
    y = (x @ np.array([[3.0], [-2.0]], dtype="float32") + 1.0).astype("float32")
    x, y = paddle.to_tensor(x), paddle.to_tensor(y)

    paddle.seed(rank)  # different initial weights: DataParallel must broadcast rank 0's
    model = paddle.DataParallel(paddle.nn.Linear(2, 1))
    optimizer = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    losses = []
    for _ in range(40):
        loss = paddle.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))

    result = {
        "rank": rank,
        "world": world,
        "env_trainer_id": int(os.environ["PADDLE_TRAINER_ID"]),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "params": [p.numpy().tolist() for p in model.parameters()],
    }
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"rank {rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
