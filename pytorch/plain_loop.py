"""A plain PyTorch serving loop, no Kiln harness: the bound Kiln's PyTorch inference row must
stay within. It loads the weights and test samples an inference run used (its weights/ file
and its exported data file), builds the network as kiln_torch does, and times one-sample
queries the way a user's loop would: eval(), inference_mode(), the input a slice of a tensor
already in memory, logits read back by argmax. Prints JSON: p50 and p90 at batch 1 over the
timed queries, and the threads torch used.

    python3 pytorch/plain_loop.py --model mlp --weights RUN/weights/mlp.safetensors \
        --data RUN/logs/data-....kdata [--queries 2000] [--warmup 500]

docs/inference.md ("The reference against a plain loop") runs it beside `cargo xtask infer`.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "kiln_torch"))

import torch  # noqa: E402

from cell import load_data  # noqa: E402
from models import Net  # noqa: E402
from verify import load_weights  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=500)
    a = p.parse_args()
    _, _, _, tx, _ = load_data(a.data, None, None)
    model = Net(a.model)
    load_weights(model, a.weights)
    model.eval()
    n = tx.shape[0]
    times = []
    with torch.inference_mode():
        for i in range(a.warmup + a.queries):
            x = tx[i % n:i % n + 1]
            t = time.perf_counter()
            model(x).argmax(1)
            if i >= a.warmup:
                times.append(time.perf_counter() - t)
    times.sort()
    at = lambda q: times[min(int(q * len(times)), len(times) - 1)]  # noqa: E731
    print(json.dumps({"model": a.model, "queries": len(times), "p50_seconds": at(0.5),
                      "p90_seconds": at(0.9), "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
