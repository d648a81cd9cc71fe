"""Parameter-server training with real PaddlePaddle 2.6 (CPU, brpc), started by paddle-launcher.

Run with `--protocol fleet`: the launcher starts this program as every pserver and every
trainer, with the PaddleCloudRoleMaker environment (see the fleet section of
docs/roles-and-protocols.md):

    paddle-launcher local --trainers 2 --job-name ps --protocol fleet \
        -- python examples/parameter_server/train.py /tmp/out

The model is the parameter server's own use case: its weights live in a sparse table on the
pservers (`sparse_embedding`), each trainer pulls the rows it needs every step and pushes their
gradients back (async mode). A linear model y = sum_i w[id_i] * x_i over 4 feature ids, where
trainer t only ever sees FEATURE_IDS[2t] and FEATURE_IDS[2t+1]: a trainer can read the other
trainer's weights only from the pservers. The table's 1000 shards are spread over the pservers
in ranges (2 pservers: shards 0-499 and 500-999, shard = id % 1000), so the ids 0, 500, 1 and 501
put rows on both. Paddle 2.6's parameter server keeps DENSE parameters on the trainers in geo
mode (only sparse tables are sent) and never pulls them back in async mode, so a dense model
would train locally, or not at all, whatever the pservers hold.

The first argument is a directory every pod shares (here, on this machine; in a cluster, the
job directory of the workspace layout). It holds a file barrier (Paddle's own barrier needs a
gloo rendezvous that this launcher does not set up), the pservers' saved tables
(`tables/`), and result-<trainer id>.json: the losses, and the 4 weights read back from the
pservers once every trainer is done. Trainer 0 then stops the pservers, which exit 0.
"""
import glob
import json
import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed.fleet as fleet

# Paddle 2.6's DistributedStrategy.__repr__ imports protobuf's C extension
# (google.protobuf.pyext._message), which no protobuf wheel for Python 3.11 has, and fleet's
# minimize() formats the strategy for a debug line even when debug logging is off.
fleet.DistributedStrategy.__repr__ = lambda self: "DistributedStrategy"

FEATURE_IDS = [0, 500, 1, 501]
TRUE_W = np.array([1.0, -0.75, 0.5, 1.0], dtype="float32")
STEPS = 400
BATCH = 32


def wait_for(pattern, count, what):
    """Waits until `count` files match `pattern`: a barrier through the shared directory."""
    deadline = time.time() + 300
    while len(glob.glob(pattern)) < count:
        if time.time() > deadline:
            sys.exit(f"gave up waiting for {what}")
        time.sleep(0.2)


def main():
    shared = sys.argv[1]
    os.makedirs(shared, exist_ok=True)
    # The barriers are files: an earlier run's would let this one through too early.
    if glob.glob(os.path.join(shared, "done-*")) or os.path.exists(os.path.join(shared, "saved")):
        sys.exit(f"{shared} holds an earlier run's files: give an empty directory")
    paddle.enable_static()
    fleet.init()  # PaddleCloudRoleMaker: the role and every endpoint from the launcher's env
    ids = [paddle.static.data(name=f"id{i}", shape=[None, 1], dtype="int64") for i in range(2)]
    x = paddle.static.data(name="x", shape=[None, 2], dtype="float32")
    y = paddle.static.data(name="y", shape=[None, 1], dtype="float32")
    table = paddle.ParamAttr(name="w", initializer=paddle.nn.initializer.Constant(0.0))
    w = paddle.concat(
        [paddle.static.nn.sparse_embedding(i, size=[1000, 1], param_attr=table) for i in ids],
        axis=1,
    )
    loss = paddle.mean(paddle.square(paddle.sum(w * x, axis=1, keepdim=True) - y))
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    strategy.a_sync_configs = {"k_steps": 0}  # async: every step pulls and pushes
    optimizer = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.05), strategy)
    optimizer.minimize(loss)

    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()  # returns when trainer 0 stops the servers
        print(f"pserver {fleet.server_index()} stopped by the trainers", flush=True)
        return

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    trainer, trainers = fleet.worker_index(), fleet.worker_num()
    rng = np.random.default_rng(7 + trainer)
    mine = slice(2 * trainer, 2 * trainer + 2)
    losses = []
    for step in range(STEPS):
        xs = rng.normal(size=(BATCH, 2)).astype("float32")
        feed = {
            "id0": np.full((BATCH, 1), FEATURE_IDS[2 * trainer], "int64"),
            "id1": np.full((BATCH, 1), FEATURE_IDS[2 * trainer + 1], "int64"),
            "x": xs,
            "y": (xs @ TRUE_W[mine]).reshape(-1, 1).astype("float32"),
        }
        (value,) = exe.run(feed=feed, fetch_list=[loss])
        losses.append(float(np.asarray(value).reshape(-1)[0]))
        if step % 100 == 0 or step == STEPS - 1:
            print(f"trainer {trainer}: step {step} loss {losses[-1]:.6f}", flush=True)
    # Paddle 2.6 has no public call for these two (fleet.stop_worker() flushes, but also
    # disconnects): its worker's own methods send the pushes still queued, and later stop the
    # pservers.
    ps_client = fleet.fleet._runtime_handle._worker
    ps_client.client_flush()
    open(os.path.join(shared, f"done-{trainer}"), "w").close()
    wait_for(os.path.join(shared, "done-*"), trainers, "the other trainers")

    def pull():
        # All four rows, from the pservers: two of them only the other trainer trained.
        feed = {
            "id0": np.array([[FEATURE_IDS[0]], [FEATURE_IDS[2]]], "int64"),
            "id1": np.array([[FEATURE_IDS[1]], [FEATURE_IDS[3]]], "int64"),
            "x": np.ones((2, 2), "float32"),
            "y": np.zeros((2, 1), "float32"),
        }
        (pulled,) = exe.run(feed=feed, fetch_list=[w])
        return np.asarray(pulled).reshape(-1).tolist()

    # Pushes are asynchronous: the rows settle once the last ones have reached the pservers.
    settled, previous = time.time() + 60, None
    while (current := pull()) != previous and time.time() < settled:
        previous = current
        time.sleep(0.5)
    open(os.path.join(shared, f"settled-{trainer}"), "w").close()
    wait_for(os.path.join(shared, "settled-*"), trainers, "the other trainers' last pushes")
    if trainer == 0:
        # Each pserver writes its shard of the table (tables/000/part-<pserver>-*.gz).
        fleet.save_persistables(exe, os.path.join(shared, "tables"))
        open(os.path.join(shared, "saved"), "w").close()
    wait_for(os.path.join(shared, "saved"), 1, "the pservers' tables")
    weights = pull()
    print(f"trainer {trainer}: weights on the pservers {weights}", flush=True)
    with open(os.path.join(shared, f"result-{trainer}.json"), "w") as f:
        json.dump({"losses": losses, "ids": FEATURE_IDS, "weights": weights}, f)
    open(os.path.join(shared, f"read-{trainer}"), "w").close()
    if trainer == 0:
        wait_for(os.path.join(shared, "read-*"), trainers, "the other trainers' reads")
        ps_client.stop_server()
    fleet.stop_worker()


if __name__ == "__main__":
    main()
