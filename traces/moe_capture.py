#!/usr/bin/env python3
"""A small PyTorch MoE-like training loop whose expert activations go through a paged stash, and
the end-to-end check of a production capture on it.

    python3 traces/moe_capture.py train --out DIR [options]
        One pipeline rank in 1F1B order over several microbatches; each MoE layer routes tokens
        to experts with a skewed router (dropless: every token goes to its expert), and each
        expert's input is stashed into a paged stash (pages of a device tier first, then of a
        pinned tier) in forward and restored in backward. Steps are NVTX ranges "step N". Every
        other step is recorded with offloadkit.ScheduleRecorder, the tokens per expert given as
        the router's CUDA tensor (copied through a pinned ring, no host synchronization) and the
        schedule events written as NVTX marks at the step's end. Writes DIR/recorder.json (the
        last recorded step's schedule) and DIR/run.json (the stash's own peak pages per tier in
        that step, step times with and without the recorder).

    python3 traces/moe_capture.py check --offloadkit PATH --out DIR [train options]
        Runs `train` under `offloadkit capture`, turns the capture's NVTX marks into a schedule
        (`offloadkit schedule-from-trace`), and checks that
        - the two schedules are the same (recorder route and trace route);
        - `offloadkit replay --plan-only` predicts the pages per tier the run itself peaked at;
        - recorded steps have as many host synchronizations as the steps without the recorder
          (the recorder adds none);
        and reports the recorder's overhead from a second `train` run outside the capture: the
        host time spent in the recorder's calls per step as a fraction of a plain step, and the
        median step time with / without the recorder (noisier). Writes DIR/report.json; exits 1
        when a check fails.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


# ---- the training loop ------------------------------------------------------------------------

def train(args):
    import torch
    import offloadkit as ok

    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    dtype = torch.bfloat16
    h, E, R = args.hidden, args.experts, args.page_rows

    class PagedStash:
        """Pages of R rows from a device tier first, then a pinned tier; a key takes all its
        pages or none (offloadkit's page rule, traces/SCHEDULE_FORMAT.md), so that replay's
        planner predicts its peaks. Counters: pages in use and their peak, per tier."""

        def __init__(self):
            self.pools = (torch.empty((args.device_pages, R, h), dtype=dtype, device=dev),
                          torch.empty((args.pinned_pages, R, h), dtype=dtype, pin_memory=True))
            self.free = (list(range(args.device_pages)), list(range(args.pinned_pages)))
            self.held = {}
            self.in_use = [0, 0]
            self.peak = [0, 0]

        def reset_peak(self):
            self.peak = list(self.in_use)

        def stash(self, key, x):
            rows = x.shape[0]
            need = -(-rows // R)
            d = min(need, len(self.free[0]))
            if need - d > len(self.free[1]):
                raise RuntimeError(f"stash of {key}: {need} pages needed, {len(self.free[0])} "
                                   f"device + {len(self.free[1])} pinned free")
            pages = [(0, self.free[0].pop()) for _ in range(d)]
            pages += [(1, self.free[1].pop()) for _ in range(need - d)]
            for i, (tier, page) in enumerate(pages):
                n = min(R, rows - i * R)
                self.pools[tier][page, :n].copy_(x[i * R:i * R + n], non_blocking=True)
            for t in (0, 1):
                self.in_use[t] += sum(1 for tier, _ in pages if tier == t)
                self.peak[t] = max(self.peak[t], self.in_use[t])
            self.held[key] = (rows, pages)

        def restore(self, key):
            rows, pages = self.held.pop(key)
            out = torch.empty((rows, h), dtype=dtype, device=dev)
            for i, (tier, page) in enumerate(pages):
                n = min(R, rows - i * R)
                out[i * R:i * R + n].copy_(self.pools[tier][page, :n], non_blocking=True)
                # Later stashes into this page are ordered after this copy on the same stream.
                self.free[tier].append(page)
                self.in_use[tier] -= 1
            return out

    stash = PagedStash()
    state = {"rec": None, "rec_s": 0.0}  # the recorder, and the host time spent in its calls

    def timed(call, *a):
        t = time.perf_counter()
        call(*a)
        state["rec_s"] += time.perf_counter() - t

    class MoELayer(torch.autograd.Function):
        """x + experts(x): top-1 routing with a skewed router; each expert's input is stashed
        in forward (layer index layer * E + e) and restored in backward in reverse order."""

        @staticmethod
        def forward(ctx, x, w, router, bias, layer, mb):
            ids = (x.float() @ router + bias).argmax(dim=1)
            counts = torch.bincount(ids, minlength=E)
            order = torch.argsort(ids, stable=True)
            sizes = counts.tolist()  # the job's own synchronization: dropless dispatch needs sizes
            xs = x[order]
            ys = torch.empty_like(xs)
            start = 0
            for e in range(E):
                xe = xs[start:start + sizes[e]]
                ys[start:start + sizes[e]] = xe @ w[e]
                stash.stash((layer * E + e, mb), xe)
                start += sizes[e]
            if state["rec"] is not None:
                timed(state["rec"].record_stashes, 0, layer * E, mb, counts)  # one copy, no sync
            out = torch.empty_like(x)
            out[order] = ys
            ctx.save_for_backward(order, w)
            ctx.sizes, ctx.layer, ctx.mb = sizes, layer, mb
            return x + out

        @staticmethod
        def backward(ctx, g):
            order, w = ctx.saved_tensors
            gs = g[order]
            gx = torch.empty_like(gs)
            gw = torch.zeros_like(w)
            starts = [0]
            for n in ctx.sizes:
                starts.append(starts[-1] + n)
            for e in reversed(range(E)):
                key = ctx.layer * E + e
                xe = stash.restore((key, ctx.mb))
                if state["rec"] is not None:
                    timed(state["rec"].record_restore, 0, key, ctx.mb)
                ge = gs[starts[e]:starts[e + 1]]
                gw[e] = xe.t() @ ge
                gx[starts[e]:starts[e + 1]] = ge @ w[e].t()
            out = torch.empty_like(g)
            out[order] = gx
            return g + out, gw, None, None, None, None

    weights = [(torch.randn(E, h, h, device=dev, dtype=dtype) / h ** 0.5).requires_grad_()
               for _ in range(args.moe_layers)]
    # Skewed routing: random logits (standard deviation about 1.4) plus a bias that favors low
    # expert ids by up to --skew.
    routers = [torch.randn(h, E, device=dev) / h ** 0.5 for _ in range(args.moe_layers)]
    bias = torch.linspace(args.skew, 0, E, device=dev)
    inputs = [torch.randn(args.tokens, h, device=dev, dtype=dtype) + 1.0
              for _ in range(args.microbatches)]

    def order_1f1b():
        warmup = min(args.pp - args.rank - 1, args.microbatches)
        seq, f, b = [], 0, 0
        for _ in range(warmup):
            seq.append(("F", f))
            f += 1
        while b < args.microbatches:
            if f < args.microbatches:
                seq.append(("F", f))
                f += 1
            seq.append(("B", b))
            b += 1
        return seq

    ring = ok.TorchRing(4096)  # one pinned ring for the whole run, shared by the steps' recorders
    nvtx = torch.cuda.nvtx
    report = {"steps": [], "tokens_per_expert_last": None}
    last_recorded = None
    for step in range(args.steps):
        # Step 0 warms up (allocator, kernels); then recorded and plain steps alternate.
        recorded = step > 0 and step % 2 == 1 and not args.no_record
        rec = None
        if recorded:
            rec = ok.ScheduleRecorder(
                virtual_stages=1, layers=args.moe_layers * E, microbatches=args.microbatches,
                row_bytes=h * 2, max_rows=args.tokens, page_rows=R,
                name=f"moe step {step}, pp={args.pp} rank={args.rank}",
                pipeline_size=args.pp, pipeline_rank=args.rank,
                device_pages=args.device_pages, pinned_pages=args.pinned_pages,
                nvtx=nvtx.mark, ring=ring)
        state["rec"], state["rec_s"] = rec, 0.0
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        nvtx.range_push(f"step {step}" + (" recorded" if recorded else ""))
        stash.reset_peak()
        losses = {}
        for phase, mb in order_1f1b():
            if phase == "F":
                x = inputs[mb]
                for layer in range(args.moe_layers):
                    x = MoELayer.apply(x, weights[layer], routers[layer], bias, layer, mb)
                losses[mb] = x.float().pow(2).mean()
            else:
                losses.pop(mb).backward()
        with torch.no_grad():
            for w in weights:
                w -= 1e-4 * w.grad
                w.grad = None
        torch.cuda.synchronize()  # the job's own step end
        if rec is not None:
            timed(rec.resolve)  # reads the ring, writes the NVTX marks: after the sync, no new one
        nvtx.range_pop()
        ms = (time.perf_counter() - t0) * 1e3
        if stash.held:
            raise RuntimeError(f"{len(stash.held)} keys still stashed at the end of step {step}")
        report["steps"].append({"step": step, "recorded": recorded, "ms": ms,
                                "recorder_ms": state["rec_s"] * 1e3,
                                "peak_device_pages": stash.peak[0],
                                "peak_pinned_pages": stash.peak[1]})
        if recorded:
            last_recorded = (rec, stash.peak[0], stash.peak[1], step)
        print(f"step {step}{' recorded' if recorded else ''}: {ms:.2f} ms, peak pages "
              f"{stash.peak[0]} device + {stash.peak[1]} pinned", flush=True)
    os.makedirs(args.out, exist_ok=True)
    if last_recorded is not None:
        rec, peak_d, peak_p, step = last_recorded
        rec.write(os.path.join(args.out, "recorder.json"))
        report.update(recorded_step=step, peak_device_pages=peak_d, peak_pinned_pages=peak_p,
                      recordings=sum(1 for s in report["steps"] if s["recorded"]))
    timed_steps = report["steps"][1:]
    with_rec = [s["ms"] for s in timed_steps if s["recorded"]]
    without = [s["ms"] for s in timed_steps if not s["recorded"]]
    if with_rec and without:
        rec_ms = [s["recorder_ms"] for s in timed_steps if s["recorded"]]
        report.update(median_ms_recorded=statistics.median(with_rec),
                      median_ms_plain=statistics.median(without),
                      overhead=statistics.median(with_rec) / statistics.median(without) - 1,
                      median_recorder_ms=statistics.median(rec_ms),
                      recorder_fraction=statistics.median(rec_ms) / statistics.median(without))
    with open(os.path.join(args.out, "run.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return 0


# ---- the end-to-end check ---------------------------------------------------------------------

HOST_WAITS = ("context", "stream", "event")


def syncs_per_step(timeline_path):
    """Host waits (context, stream, event synchronizations) inside each NVTX range "step ..."."""
    with open(timeline_path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    recs = [e["args"] | {"name": e.get("name", "")} for e in events
            if isinstance(e.get("args"), dict) and "kind" in e["args"]]
    steps = [r for r in recs if r["kind"] == "range" and r["name"].startswith("step ")
             and r["end_ns"] > r["start_ns"]]
    out = []
    for s in sorted(steps, key=lambda r: r["start_ns"]):
        n = sum(1 for r in recs if r["kind"] == "sync" and r["sync"] in HOST_WAITS
                and s["start_ns"] <= r["start_ns"] < s["end_ns"])
        out.append({"step": s["name"], "host_waits": n})
    return out


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def check(args, train_argv):
    ok_cli = args.offloadkit
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    report, failures = {}, []
    me = [sys.executable, os.path.abspath(__file__), "train"] + train_argv
    cap = run([ok_cli, "capture", "-o", os.path.join(out, "capture.json"), "--"] + me
              + ["--out", out])
    print(cap.stdout + cap.stderr)
    if cap.returncode != 0:
        print(f"capture failed with exit status {cap.returncode}", file=sys.stderr)
        return 1
    report["capture_report"] = cap.stdout
    with open(os.path.join(out, "run.json"), encoding="utf-8") as f:
        train_report = json.load(f)
    nvtx_ranges = len(re.findall(r'"kind":"range"', open(os.path.join(out, "capture.json"),
                                                          encoding="utf-8").read()))
    report["nvtx_records"] = nvtx_ranges
    m = re.search(r"steps: (\d+)", cap.stdout)
    report["steps_found"] = int(m.group(1)) if m else 0
    if report["steps_found"] != args.steps:
        failures.append(f"the capture found {report['steps_found']} NVTX steps, the run had "
                        f"{args.steps}")

    # Route 2: the trace's marks back into a schedule.
    last = train_report["recordings"] - 1
    conv = run([ok_cli, "schedule-from-trace", os.path.join(out, "capture.json"),
                "--recording", str(last), "-o", os.path.join(out, "trace.json")])
    print(conv.stdout + conv.stderr)
    if conv.returncode != 0:
        failures.append(f"schedule-from-trace failed: {conv.stderr.strip()}")
    else:
        from offloadkit.schedule import expanded

        with open(os.path.join(out, "recorder.json"), encoding="utf-8") as f:
            a = expanded(json.load(f))
        with open(os.path.join(out, "trace.json"), encoding="utf-8") as f:
            b = expanded(json.load(f))
        report["schedules_equal"] = a == b
        if a != b:
            failures.append("the recorder's schedule and the trace's schedule differ")

        # Replay's prediction against the run's own counters.
        plan = run([ok_cli, "replay", os.path.join(out, "trace.json"), "--plan-only"])
        print(plan.stdout + plan.stderr)
        m = re.search(r"peak use under the pool: (\d+) device, (\d+) pinned pages", plan.stdout)
        if plan.returncode != 0 or m is None:
            failures.append(f"replay --plan-only gave no peak under the pool (exit "
                            f"{plan.returncode})")
        else:
            predicted = (int(m.group(1)), int(m.group(2)))
            measured = (train_report["peak_device_pages"], train_report["peak_pinned_pages"])
            report["replay_peak_pages"] = {"device": predicted[0], "pinned": predicted[1]}
            report["run_peak_pages"] = {"device": measured[0], "pinned": measured[1]}
            if predicted != measured:
                failures.append(f"replay predicts {predicted[0]} device + {predicted[1]} pinned "
                                f"pages, the run peaked at {measured[0]} + {measured[1]}")

    # The recorder adds no host synchronization: recorded and plain steps wait as often.
    per_step = syncs_per_step(os.path.join(out, "capture.json"))
    report["host_waits_per_step"] = per_step
    rec_waits = {s["host_waits"] for s in per_step[1:] if s["step"].endswith("recorded")}
    plain_waits = {s["host_waits"] for s in per_step[1:] if not s["step"].endswith("recorded")}
    if rec_waits != plain_waits:
        failures.append(f"host waits per step differ: recorded steps {sorted(rec_waits)}, "
                        f"plain steps {sorted(plain_waits)}")

    # The recorder's overhead, outside the capture (CUPTI costs time of its own).
    timing_dir = os.path.join(out, "timing")
    timing = run(me + ["--out", timing_dir, "--steps", str(args.timing_steps)])
    if timing.returncode != 0:
        failures.append(f"the timing run failed: {timing.stderr.strip()[-2000:]}")
    else:
        with open(os.path.join(timing_dir, "run.json"), encoding="utf-8") as f:
            t = json.load(f)
        report["timing"] = {k: t[k] for k in ("median_ms_recorded", "median_ms_plain",
                                              "overhead", "median_recorder_ms",
                                              "recorder_fraction") if k in t}
    report["failures"] = failures
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(json.dumps({k: v for k, v in report.items() if k != "capture_report"}, indent=2))
    for fail in failures:
        print(f"FAIL {fail}", file=sys.stderr)
    return 1 if failures else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("train", "check"):
        q = sub.add_parser(name)
        q.add_argument("--out", required=True, help="the folder for the files written")
        q.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
        q.add_argument("--microbatches", type=int, default=8)
        q.add_argument("--pp", type=int, default=4, help="pipeline ranks (default 4)")
        q.add_argument("--rank", type=int, default=1, help="this rank (default 1)")
        q.add_argument("--moe-layers", type=int, default=2)
        q.add_argument("--experts", type=int, default=8)
        q.add_argument("--hidden", type=int, default=4096)
        q.add_argument("--tokens", type=int, default=4096, help="tokens per microbatch")
        q.add_argument("--skew", type=float, default=1.5,
                       help="router bias toward low expert ids (default 1.5)")
        q.add_argument("--page-rows", type=int, default=64)
        q.add_argument("--device-pages", type=int, default=256)
        q.add_argument("--pinned-pages", type=int, default=1024)
        q.add_argument("--seed", type=int, default=1)
        if name == "train":
            q.add_argument("--no-record", action="store_true", help="never record")
        else:
            q.add_argument("--offloadkit", required=True, help="the offloadkit command")
            q.add_argument("--timing-steps", type=int, default=41,
                           help="steps of the timing run (default 41)")
    args = p.parse_args(argv)
    for field in ("steps", "microbatches", "pp", "moe_layers", "experts", "hidden", "tokens",
                  "page_rows"):
        if getattr(args, field) < 1:
            p.error(f"--{field.replace('_', '-')}: {getattr(args, field)} is below 1")
    if not 0 <= args.rank < args.pp:
        p.error(f"--rank: {args.rank} is outside [0, {args.pp})")
    if args.command == "train":
        return train(args)
    # The train options as given, for the runs check makes.
    train_argv, skip = [], False
    for i, a in enumerate(argv[1:]):
        if skip:
            skip = False
            continue
        if a in ("--offloadkit", "--out", "--timing-steps", "--steps"):
            skip = True
            continue
        if a.split("=")[0] in ("--offloadkit", "--out", "--timing-steps", "--steps"):
            continue
        train_argv.append(a)
    return check(args, train_argv + ["--steps", str(args.steps)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
