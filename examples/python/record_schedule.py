"""Records the paged-stash schedule of a (simulated) MoE training step with
offloadkit.ScheduleRecorder and writes it for ``offloadkit replay``.

A real job calls ``record_stash`` / ``record_restore`` where its stash does; here one pipeline rank
runs interleaved 1F1B over its virtual stages with a random token count per expert activation.

    python3 record_schedule.py step.json [--seed N] [--pipeline-size P] [--rank R]
    offloadkit replay step.json
"""

import argparse
import random
import sys

import offloadkit as ok


def one_f_one_b(microbatches, warmup):
    """The order of forwards ("F", mb) and backwards ("B", mb) of one rank under 1F1B."""
    order, next_f, next_b = [], 0, 0
    for _ in range(min(warmup, microbatches)):
        order.append(("F", next_f))
        next_f += 1
    while next_b < microbatches:
        if next_f < microbatches:
            order.append(("F", next_f))
            next_f += 1
        order.append(("B", next_b))
        next_b += 1
    return order


def record_step(rec, args, rng):
    warmup = args.pipeline_size - args.rank - 1
    for phase, mb in one_f_one_b(args.microbatches, warmup):
        if phase == "F":  # this rank's chunks in order, each layer's experts stashed
            for vp in range(args.virtual_stages):
                for layer in range(args.layers):
                    tokens = min(args.max_rows, int(rng.expovariate(1 / args.mean_rows)))
                    rec.record_stash(vp, layer, mb, rows=tokens)
        else:  # backward runs the chunks in reverse and restores as it goes
            for vp in reversed(range(args.virtual_stages)):
                for layer in reversed(range(args.layers)):
                    rec.record_restore(vp, layer, mb)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pipeline-size", type=int, default=4)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--virtual-stages", type=int, default=2)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--max-rows", type=int, default=512)
    p.add_argument("--mean-rows", type=float, default=200)
    p.add_argument("--row-bytes", type=int, default=2 * 1024)
    args = p.parse_args(argv)
    rec = ok.ScheduleRecorder(
        virtual_stages=args.virtual_stages, layers=args.layers, microbatches=args.microbatches,
        row_bytes=args.row_bytes, max_rows=args.max_rows, page_rows=64,
        name=f"simulated MoE step, pp={args.pipeline_size} rank={args.rank} seed={args.seed}",
        pipeline_size=args.pipeline_size, pipeline_rank=args.rank)
    record_step(rec, args, random.Random(args.seed))
    rec.write(args.output)
    print(f"{args.output}: {rec.steps_recorded} stashes and restores recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
