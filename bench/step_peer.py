"""What the peer step scripts (bench/*_step_peer.py) share: their options and the timing loop. The
baselines bench_quickstart_quality --peer compares ZeroStudio's step time with."""
import argparse
import statistics
import time

import torch


def options(doc):
    """--steps, --warmup, --threads and --vocab, parsed; torch's threads and seed set."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    p.add_argument("--vocab", type=int, default=40, help="the word tokenizer's vocabulary size")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def time_steps(args, params, batch, loss_of):
    """Runs warmup + steps AdamW steps on `params`: `batch()` draws one step's tensors (not timed),
    `loss_of(*tensors)` is the forward and loss (timed, with backward and the update). Prints
    `peer_step_s S`, the median of the timed steps."""
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    times = []
    for step in range(args.warmup + args.steps):
        tensors = batch()
        started = time.perf_counter()
        loss = loss_of(*tensors)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    print(f"peer_step_s {statistics.median(times):.6f}")
