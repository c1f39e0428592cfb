#!/usr/bin/env python3
"""bench_peers: offloadkit's optimized region and activation offload side by side with the
ecosystem's offload libraries, in one run, each figure as a fraction of the limit measured in the
same run and as offloadkit's speed-up over each peer.

- region, 1-8 GiB: pause, resume, and the RL phase switch (one region paused while another
  resumes; offloadkit's ``swap_with`` does both at once) of offloadkit's graph-stable region
  (``vmm_region``) against torch_memory_saver (its defaults, and
  ``retain_cpu_backup``) and vLLM's sleep mode (``CuMemAllocator``);
- activation, on bench_activation_mlp's MLP shapes: forward (every saved tensor packed) and
  backward (every one unpacked) of offloadkit's offloader against torchtune's and TRL's
  ``OffloadActivations`` (single-stream mode), Megatron-LM's fine-grained activation offloading
  (its defaults: tensors of at least 1048576 elements) and PyTorch's
  ``save_on_cpu(pin_memory=True)``;
- Megatron-LM's paged stash: not timed here (its row says why; its adapter is checked).

Every row, offloadkit's included, is driven through the same path: the object ``python -m
offloadkit check`` checks (a peer's ``offloadkit.adapters`` adapter; offloadkit's own C++
implementations through ``offloadkit.optimized``, the classes PyTorch users build), timed with
torch.cuda events on one stream; its limit is a plain pinned copy of the same bytes (each
direction; both at once for the phase switch) made with torch on the same device, taking turns
with the object's operations (``peers_measure.py``). offloadkit's speed-up over a peer is the ratio
of the two fractions of the limit. The rows "offloadkit-c++" come from offloadkit's C++ benchmarks
(``bench_region --json``, ``bench_activation_mlp --json``, run as child processes in the same run,
each measuring its own limit): the same implementations without Python, for comparison
(``--no-cpp-benchmarks`` leaves them out).

Each peer (library) runs in a child process of its own (this program, this Python), because
several of them are process-global: torch_memory_saver's hook mode, vLLM's CuMemAllocator
singleton, Megatron-LM's offloading manager (whose import sets torch_memory_saver's hook mode).
The parent imports no peer and no PyTorch; it gathers each child's rows. A child that crashes,
exits early or runs past --peer-timeout fails that peer's rows it had not written, with how it
ended and its last lines, and the run goes on; one that goes wrong after writing all its rows
keeps them, and the way it ended is said under the table and in the row's "shutdown" (JSON).
--in-process runs every peer in this process instead (for a debugger; the peers can interfere).

The activation rows are driven on two streams (--activation-streams): a stream of the run's own
("side"), where the saved tensors are produced and consumed as in a loop that computes on a stream
of its own, and the device's default stream ("default"), where a plain PyTorch loop computes.
A library that copies on the default stream without waiting for the stream a tensor was produced
on (torchtune's and TRL's OffloadActivations; CONFORMANCE.md) loses data on the side stream and is
timed on the default one; offloadkit is compared with each peer on the same stream.

A row that cannot run here says why (PyTorch, CUDA or a library that does not import: Python's
ImportError text; no GPU; a library that refuses the operation: the adapter's message) and the
program still exits 0. A row whose contents come back wrong after its timed rounds (#wrong above
0: bytes of a region, bf16 elements of the saved tensors) is a failed row, its figures kept in the
JSON but not compared; unless --known-wrong names its peer and stream (a defect already
classified), when it is "known-wrong" and does not fail the run, while such a row whose contents
come back right does fail it (the defect is gone: the option is out of date).

A run stopped by SIGTERM or SIGINT (a CI job's time limit, Ctrl-C) kills the peer's process under
way and still prints the table and writes --json with every row measured so far; the rows it did
not reach are "not measured" and the document says "interrupted".

Exit status: 0 ok (rows that cannot run here are skipped, with the reason; known-wrong rows
are said), 1 a row failed (its contents came back wrong, or right against --known-wrong, its
measurement raised, its peer's process ended before it) or --json could not be written, 2 bad
usage, 128+N stopped by signal N (what was measured is kept).
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import offloadkit  # noqa: F401
except ImportError:  # run from a checkout: the package's source
    sys.path.insert(0, os.path.join(ROOT, "python"))

import peers_measure as measure  # noqa: E402
from offloadkit import adapters  # noqa: E402
from offloadkit._bridge import load_factory  # noqa: E402
from offloadkit._commandline import _Parser as Parser, integer_in  # noqa: E402

MIB = 1 << 20
#: How a peer's child process is started: this program in this Python (the tests put a stand-in
#: setup in front of it). The child gets --peer-worker FEATURE NAME FACTORY --peer-out FILE and
#: the measuring options.
WORKER_COMMAND = [sys.executable, os.path.abspath(__file__)]
#: --peer-timeout's default: a peer's child still running after this is killed, its rows failing.
DEFAULT_PEER_TIMEOUT_S = 3600
REGION_OPERATIONS = ("pause", "resume", "phase switch")
ACTIVATION_OPERATIONS = ("forward", "backward")
DEFAULT_SHAPES = ((4096, 4096), (4096, 16384), (8192, 8192))  # bench_activation_mlp's
QUICK_SHAPE = (1024, 2048)

#: The name of offloadkit's own rows (its optimized implementations through offloadkit.optimized),
#: and of the rows of its C++ benchmarks.
OFFLOADKIT = "offloadkit"
OFFLOADKIT_CPP = "offloadkit-c++"
#: Region peers: (name, factory), offloadkit's first.
REGION_PEERS = (
    (OFFLOADKIT, "offloadkit.optimized:make"),
    ("torch_memory_saver", "offloadkit.adapters.torch_memory_saver:make"),
    ("torch_memory_saver-retain", "offloadkit.adapters.torch_memory_saver:make_retain_cpu_backup"),
    ("vllm-cumem", "offloadkit.adapters.vllm:make"),
)
#: Activation peers: (name, factory), offloadkit's first.
ACTIVATION_PEERS = (
    (OFFLOADKIT, "offloadkit.optimized:make"),
    ("torchtune", "offloadkit.adapters.torchtune:make_single_stream"),
    ("trl", "offloadkit.adapters.trl:make_single_stream"),
    ("torch-save-on-cpu", "offloadkit.adapters.torch_save_on_cpu:make"),
    ("megatron-fine-grained", "offloadkit.adapters.megatron:make"),
)


def integer(low: int, high: int) -> Any:
    """An argparse type: an integer in [low, high], refused naming the value and the range."""

    def parse(text: str) -> int:
        try:
            return integer_in(text, low, high)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def shape(text: str) -> Tuple[int, int]:
    try:
        hidden, tokens = (int(x, 10) for x in text.split("x"))
    except ValueError:
        hidden = tokens = 0
    if hidden < 64 or hidden % 64 or tokens < 1:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not HIDDENxTOKENS with HIDDEN a multiple of 64 and TOKENS >= 1, e.g. "
            "4096x4096")
    return hidden, tokens


def parser() -> Parser:
    p = Parser(prog="bench_peers", description=__doc__.split("\n\n")[0],
               epilog=__doc__.split("\n\n", 1)[1], allow_abbrev=False,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    # argparse names a bad value "argument --x: invalid parse value: 'v'"; the type's own text is
    # what the benchmarks print, so the type errors are reworded in check_values().
    p.add_argument("--quick", action="store_true",
                   help="small sizes (8 to 16 MiB), one small MLP shape (1024x2048), 2 rounds: "
                        "a smoke run")
    p.add_argument("--min-mib", metavar="N", default="1024",
                   help="smallest region size in MiB, doubled up to --max-mib, 1..1048576 "
                        "(default 1024)")
    p.add_argument("--max-mib", metavar="N", default="8192",
                   help="largest region size in MiB, 1..1048576 (default 8192)")
    p.add_argument("--reps", metavar="N", default="5",
                   help="timed rounds per figure, median taken, 1..100 (default 5)")
    p.add_argument("--blocks", metavar="N", default="8",
                   help="blocks of the MLP stack, 1..64 (default 8)")
    p.add_argument("--shape", metavar="HIDDENxTOKENS",
                   help="one MLP shape instead of bench_activation_mlp's three (4096x4096, "
                        "4096x16384, 8192x8192)")
    p.add_argument("--feature", metavar="NAME", default="all",
                   help="only this feature's rows: region, activation or all (default all)")
    p.add_argument("--bench-region", metavar="PATH",
                   help="offloadkit's bench_region (default: build-gpu/ or build/ of this "
                        "checkout, else PATH)")
    p.add_argument("--bench-activation-mlp", metavar="PATH",
                   help="offloadkit's bench_activation_mlp (default: as --bench-region)")
    p.add_argument("--activation-streams", metavar="LIST", default="side,default",
                   help="the streams the activation rows are driven on, comma-separated: side (a "
                        "stream of the benchmark's own, as a loop that computes on its own "
                        "stream) and default (the device's default stream, where a plain PyTorch "
                        "loop computes); default: side,default")
    p.add_argument("--known-wrong", metavar="PEER:STREAM,...", default="",
                   help="rows of PEER's activation offload on STREAM (side or default) whose "
                        "contents are known to come back wrong (a defect classified in "
                        "CONFORMANCE.md): such rows are 'known-wrong', not failed; one that "
                        "comes back right fails, saying the defect is gone")
    p.add_argument("--offloadkit-executor", metavar="NAME", default="cuda",
                   help="the executor of offloadkit's own benchmarks: cuda or host (a host "
                        "figure is no GPU figure; for smoke runs) (default cuda)")
    p.add_argument("--no-offloadkit", action="store_true",
                   help="leave offloadkit's own rows out, its C++ benchmarks' too (the peers "
                        "alone)")
    p.add_argument("--no-cpp-benchmarks", action="store_true",
                   help="leave out the rows of offloadkit's C++ benchmarks (offloadkit-c++)")
    p.add_argument("--json", metavar="FILE", help="also write every row to FILE as JSON")
    p.add_argument("--peer-timeout", metavar="SECONDS", default=str(DEFAULT_PEER_TIMEOUT_S),
                   help="a peer's process still running after SECONDS is killed and its rows "
                        f"fail, 1..86400 (default {DEFAULT_PEER_TIMEOUT_S})")
    p.add_argument("--in-process", action="store_true",
                   help="every peer in this process, one after another, instead of each in a "
                        "process of its own (for a debugger: process-global libraries can "
                        "interfere)")
    # The child side of a peer's process (WORKER_COMMAND): not for people.
    p.add_argument("--peer-worker", nargs=3, metavar=("FEATURE", "NAME", "FACTORY"),
                   help=argparse.SUPPRESS)
    p.add_argument("--peer-out", metavar="FILE", help=argparse.SUPPRESS)
    return p


def check_values(p: Parser, o: argparse.Namespace) -> None:
    """Reads the numbers and names, refusing a bad one with the option, the value and the valid
    range."""
    for name, low, high in (("min_mib", 1, 1 << 20), ("max_mib", 1, 1 << 20), ("reps", 1, 100),
                            ("blocks", 1, 64), ("peer_timeout", 1, 86400)):
        try:
            setattr(o, name, integer(low, high)(getattr(o, name)))
        except argparse.ArgumentTypeError as e:
            p.error(f"--{name.replace('_', '-')}: {e}")
    if o.min_mib > o.max_mib:
        p.error(f"--min-mib: {o.min_mib} is out of range: valid range 1..{o.max_mib} (--max-mib)")
    if o.shape is not None:
        try:
            o.shape = shape(o.shape)
        except argparse.ArgumentTypeError as e:
            p.error(f"--shape: {e}")
    for option, value, valid in (("--feature", o.feature, ("region", "activation", "all")),
                                 ("--offloadkit-executor", o.offloadkit_executor,
                                  ("cuda", "host"))):
        if value not in valid:
            p.error(f"{option}: {value} is not one of the valid values {', '.join(valid)}")
    o.activation_streams = _names(p, "--activation-streams", o.activation_streams,
                                  measure.STREAMS)
    known = []
    for entry in (e for e in o.known_wrong.split(",") if e):
        peer, _, stream = entry.partition(":")
        names = [n for n, _ in ACTIVATION_PEERS if n != OFFLOADKIT]
        if peer not in names:
            p.error(f"--known-wrong: {peer} is not one of the activation peers {', '.join(names)}")
        if stream not in measure.STREAMS:
            p.error(f"--known-wrong: {entry}: the stream '{stream}' is not one of the valid "
                    f"values {', '.join(measure.STREAMS)} (PEER:STREAM)")
        known.append((peer, stream))
    o.known_wrong = known
    if (o.peer_worker is None) != (o.peer_out is None):
        p.error("--peer-worker and --peer-out go together: they are how bench_peers runs one "
                "peer in a process of its own")
    if o.peer_worker is not None and o.peer_worker[0] not in ("region", "activation"):
        p.error(f"--peer-worker: {o.peer_worker[0]} is not one of the valid features region, "
                "activation")


def _names(p: Parser, option: str, text: str, valid: Sequence[str]) -> List[str]:
    """A comma-separated list of names of ``valid``, each once, in ``valid``'s order."""
    given = [n for n in text.split(",") if n]
    for n in given:
        if n not in valid:
            p.error(f"{option}: {n} is not one of the valid values {', '.join(valid)}")
    if not given:
        p.error(f"{option}: '{text}' names none of the valid values {', '.join(valid)}")
    return [n for n in valid if n in given]


# The run's start on the system's monotonic clock: a peer's process inherits its parent's, so that
# every line counts from the same moment.
_STARTED = float(os.environ.setdefault("OFFLOADKIT_PEERS_STARTED", repr(time.monotonic())))


def progress(text: str) -> None:
    """One line on stderr: what starts now, and the seconds since the run started."""
    sys.stderr.write(f"bench_peers: {text} (at {time.monotonic() - _STARTED:.0f} s)\n")
    sys.stderr.flush()


# ---- rows ----------------------------------------------------------------------------------


def row(feature: str, operation: str, implementation: str, **fields: Any) -> Dict[str, Any]:
    out = {"feature": feature, "operation": operation, "implementation": implementation,
           "status": "ok"}
    out.update(fields)
    return out


def skipped(feature: str, operation: str, implementation: str, reason: str,
            **fields: Any) -> Dict[str, Any]:
    return row(feature, operation, implementation, status="skipped", reason=reason, **fields)


def failed(feature: str, operation: str, implementation: str, error: BaseException,
           **fields: Any) -> Dict[str, Any]:
    return row(feature, operation, implementation, status="failed",
               reason=f"{type(error).__name__}: {error}", **fields)


def megatron_row() -> Dict[str, Any]:
    """The paged stash of Megatron-LM: its adapter is checked (python -m offloadkit check, the
    ecosystem's matrix), but this program has no stash race to time it in."""
    return skipped("stash", "stash/restore", "megatron-paged-stash",
                   "not timed here: bench_peers has no stash race yet (its adapter, "
                   "offloadkit.adapters.megatron_paged_stash, is checked by python -m offloadkit "
                   "check and ecosystem)")


# ---- the peers, in this interpreter -------------------------------------------------------


def load_torch() -> Tuple[Optional[Any], str]:
    """torch and "" where a GPU is usable through it, else None and why not."""
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch cannot be imported here ({sys.executable}): {e}"
    if not torch.cuda.is_available():
        return None, (f"no CUDA device usable by PyTorch {torch.__version__} "
                      f"(torch.version.cuda = {getattr(torch.version, 'cuda', None)})")
    return torch, ""


def feature_class(factory: str, feature: str) -> Tuple[Optional[Any], str, str]:
    """(the feature class the factory's plugin provides, the plugin's version, "") or (None, "",
    why not: the ImportError or the adapter's refusal)."""
    try:
        plugin = load_factory(factory)()
    except Exception as e:  # the adapter's LibraryMissing / Unsupported, or an import error
        return None, "", f"{factory}: {type(e).__name__}: {e}"
    value = getattr(plugin, feature, None)
    if value is None:
        return None, "", f"{factory}: the plugin has no {feature}"
    return value, str(getattr(plugin, "version", "")), ""


def sizes(o: argparse.Namespace) -> List[int]:
    low, high = (8, 16) if o.quick else (o.min_mib, o.max_mib)
    out, m = [], low
    while m <= high:
        out.append(m * MIB)
        m *= 2
    return out


def shapes(o: argparse.Namespace) -> List[Tuple[int, int]]:
    if o.shape is not None:
        return [o.shape]
    return [QUICK_SHAPE] if o.quick else list(DEFAULT_SHAPES)


def planned_shapes(o: argparse.Namespace) -> List[Tuple[Tuple[int, int], str]]:
    """The (shape, stream) of each activation peer's rows, in the order they are measured."""
    return [(s, stream) for s in shapes(o) for stream in o.activation_streams]


def measured_rows(rows: List[Dict[str, Any]], kind: str, ops: Sequence[str], name: str,
                  common: Dict[str, Any],
                  measure_ops: Callable[[Dict[str, int]], Dict[str, Dict[str, Any]]]) -> None:
    """Appends one row per operation of ``ops`` from ``measure_ops(calls)`` (figures per
    operation; ``calls`` counts the library calls it made), or, where it raises, one failed row
    per operation with the error."""
    calls: Dict[str, int] = {}
    try:
        figures = measure_ops(calls)
        for op in ops:
            rows.append(row(kind, op, name, calls=dict(calls), **common, **figures[op]))
    except Exception as e:
        for op in ops:
            rows.append(failed(kind, op, name, e, calls=dict(calls), **common))
        traceback.print_exc()


def region_peer(o: argparse.Namespace, torch: Optional[Any], why: str, dev: Optional[Any],
                name: str, factory: str,
                written: Optional[Callable[[List[Dict[str, Any]]], None]] = None
                ) -> List[Dict[str, Any]]:
    """One region peer's rows, every size; ``written`` sees the rows so far after each size."""
    rows: List[Dict[str, Any]] = []
    cls, version, refused = (None, "", why) if torch is None else feature_class(factory,
                                                                              "region")
    for nbytes in sizes(o):
        if written is not None:
            written(rows)
        common = {"bytes": nbytes, "factory": factory, "version": version}
        if cls is None:
            for op in ("pause", "resume", "phase switch"):
                rows.append(skipped("region", op, name, refused, **common))
            continue
        progress(f"region {name} {nbytes // MIB} MiB")
        measured_rows(rows, "region", ("pause", "resume"), name, common,
                      lambda calls: measure.measure_region(dev, cls, nbytes, o.reps, calls))
        calls: Dict[str, int] = {}
        try:
            rows.append(row("region", "phase switch", name,
                            **measure.measure_switch(dev, cls, nbytes, o.reps, calls),
                            calls=calls, **common))
        except adapters.Unsupported as e:  # the library's design, said by its adapter
            rows.append(skipped("region", "phase switch", name, str(e), calls=calls,
                                **common))
        except Exception as e:
            rows.append(failed("region", "phase switch", name, e, calls=calls, **common))
            traceback.print_exc()
    return rows


def region_peers(o: argparse.Namespace, torch: Optional[Any], why: str,
                 dev: Optional[Any]) -> List[Dict[str, Any]]:
    """Every region peer in this process (--in-process)."""
    return [r for name, factory in peer_table(o, REGION_PEERS)
            for r in region_peer(o, torch, why, dev, name, factory)]


def activation_peer(o: argparse.Namespace, torch: Optional[Any], why: str, dev: Optional[Any],
                    name: str, factory: str,
                    written: Optional[Callable[[List[Dict[str, Any]]], None]] = None
                    ) -> List[Dict[str, Any]]:
    """One activation peer's rows, every shape and stream; ``written`` sees the rows so far
    after each."""
    rows: List[Dict[str, Any]] = []
    cls, version, refused = (None, "", why) if torch is None else feature_class(
        factory, "activation")
    for (hidden, tokens), stream in planned_shapes(o):
        if written is not None:
            written(rows)
        saved = sum(r * c * 2 for b in measure.mlp_saved_shapes(o.blocks, hidden, tokens)
                    for r, c in b)
        common = {"hidden": hidden, "tokens": tokens, "stream": stream, "blocks": o.blocks,
                  "bytes": saved, "factory": factory, "version": version}
        if cls is None:
            for op in ("forward", "backward"):
                rows.append(skipped("activation", op, name, refused, **common))
            continue
        progress(f"activation {name} {hidden}x{tokens} on the {stream} stream")
        measured_rows(rows, "activation", ("forward", "backward"), name, common,
                      lambda calls: measure.measure_activation(dev.on(stream), cls, o.blocks,
                                                               hidden, tokens, o.reps, calls))
    return rows


def activation_peers(o: argparse.Namespace, torch: Optional[Any], why: str,
                     dev: Optional[Any]) -> List[Dict[str, Any]]:
    """Every activation peer in this process (--in-process)."""
    return [r for name, factory in peer_table(o, ACTIVATION_PEERS)
            for r in activation_peer(o, torch, why, dev, name, factory)]


# ---- each peer in a process of its own ------------------------------------------------------


def _write_json(path: str, doc: Dict[str, Any]) -> None:
    """Replaces ``path`` whole (a reader never sees half a document)."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def worker_main(o: argparse.Namespace) -> int:
    """The child side (--peer-worker FEATURE NAME FACTORY --peer-out FILE): one peer's rows,
    written to FILE after each size or shape and once more, with "done", at the end."""
    feature, name, factory = o.peer_worker
    torch, why = load_torch()
    dev = measure.Device(torch) if torch is not None else None
    doc: Dict[str, Any] = {"device": dev.name if dev is not None else None,
                           "torch": getattr(torch, "__version__", None), "rows": [],
                           "done": False}

    def written(rows: List[Dict[str, Any]]) -> None:
        doc["rows"] = rows
        _write_json(o.peer_out, doc)

    measure_peer = region_peer if feature == "region" else activation_peer
    rows = measure_peer(o, torch, why, dev, name, factory, written)
    doc["done"] = True
    written(rows)
    return 0


def peer_table(o: argparse.Namespace,
               table: Sequence[Tuple[str, str]]) -> Sequence[Tuple[str, str]]:
    """The (name, factory) of the peers this run measures: ``table`` less offloadkit's own row
    under --no-offloadkit."""
    return [(n, f) for n, f in table if not (o.no_offloadkit and n == OFFLOADKIT)]


def planned(o: argparse.Namespace, feature: str) -> List[Tuple[Any, str]]:
    """The (size or shape, operation) of every row a peer of ``feature`` gives."""
    if feature == "region":
        return [(nbytes, op) for nbytes in sizes(o) for op in REGION_OPERATIONS]
    return [((s, stream), op) for s, stream in planned_shapes(o) for op in ACTIVATION_OPERATIONS]


def _where(r: Dict[str, Any]) -> Any:
    """A peer row's size (region) or (shape, stream) (activation)."""
    return r.get("bytes") if r["feature"] == "region" else (
        (r.get("hidden"), r.get("tokens")), r.get("stream"))


def how_it_ended(rc: Optional[int], timeout_s: int) -> str:
    if rc is None:
        return f"was still running after {timeout_s} s (--peer-timeout) and was killed"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"crashed: signal {-rc} ({name})"
    return f"exited with status {rc}"


def measuring_options(o: argparse.Namespace) -> List[str]:
    """The options that shape a peer's rows, for its child."""
    args = ["--min-mib", str(o.min_mib), "--max-mib", str(o.max_mib), "--reps", str(o.reps),
            "--blocks", str(o.blocks), "--activation-streams", ",".join(o.activation_streams)]
    if o.quick:
        args.append("--quick")
    if o.shape is not None:
        args += ["--shape", f"{o.shape[0]}x{o.shape[1]}"]
    return args


class Interrupted(Exception):
    """SIGTERM or SIGINT reached the parent: the run stops, keeping what it measured."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001 (a signal handler's signature)
    raise Interrupted(signum)


def run_peer(o: argparse.Namespace, feature: str, name: str,
             factory: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """One peer's rows from a child process of its own (WORKER_COMMAND), and what the child
    said of the machine (device, torch). Rows the child did not write fail, naming how it ended
    and its last lines; a child that went wrong after all its rows keeps them, each with
    "shutdown" saying how it ended."""
    with tempfile.TemporaryDirectory(prefix="bench_peers-peer-") as tmp:
        out, log = os.path.join(tmp, "rows.json"), os.path.join(tmp, "output.log")
        command = WORKER_COMMAND + ["--peer-worker", feature, name, factory, "--peer-out",
                                    out] + measuring_options(o)
        progress(f"{feature} {name}: in a process of its own")
        with open(log, "w") as f:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=f,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc: Optional[int] = child.wait(timeout=o.peer_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                rc = None
            except BaseException:  # interrupted: the peer's process goes with the run
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                with open(log, errors="replace") as f:
                    sys.stderr.write(f.read())
                raise
        with open(log, errors="replace") as f:
            output = f.read()
        sys.stderr.write(output)
        doc: Dict[str, Any] = {}
        if os.path.isfile(out):
            with open(out) as f:
                doc = json.load(f)
    rows = list(doc.get("rows", []))
    ended = how_it_ended(rc, o.peer_timeout)
    if rc != 0 and doc.get("done"):
        for r in rows:
            r["shutdown"] = f"its process {ended} after writing its rows"
        return rows, doc
    if rc == 0 and doc.get("done"):
        return rows, doc
    tail = " | ".join(output.strip().splitlines()[-3:])
    reason = f"the peer's process {ended} before this row" + (f": {tail}" if tail else "")
    return rows + missing_rows(o, feature, name, factory, rows, "failed", reason), doc


def missing_rows(o: argparse.Namespace, feature: str, name: str, factory: str,
                 rows: Sequence[Dict[str, Any]], status: str,
                 reason: str) -> List[Dict[str, Any]]:
    """A row of ``status`` with ``reason`` for each row the peer ``name`` was to give and
    ``rows`` lacks."""
    have = {(_where(r), r["operation"]) for r in rows
            if r["feature"] == feature and r["implementation"] == name}
    out = []
    for where, op in planned(o, feature):
        if (where, op) in have:
            continue
        fields: Dict[str, Any] = {"factory": factory}
        if feature == "region":
            fields["bytes"] = where
        else:
            fields.update(hidden=where[0][0], tokens=where[0][1], stream=where[1],
                          blocks=o.blocks)
        out.append(row(feature, op, name, status=status, reason=reason, **fields))
    return out


def not_measured(o: argparse.Namespace, rows: List[Dict[str, Any]],
                 reason: str) -> List[Dict[str, Any]]:
    """A skipped row, with ``reason``, for each peer row the run planned and did not reach."""
    out: List[Dict[str, Any]] = []
    for feature, table in (("region", REGION_PEERS), ("activation", ACTIVATION_PEERS)):
        if o.feature in (feature, "all"):
            for name, factory in peer_table(o, table):
                out += missing_rows(o, feature, name, factory, rows, "skipped", reason)
    return out


def judge_contents(rows: List[Dict[str, Any]],
                   known: Sequence[Tuple[str, str]] = ()) -> None:
    """A measured row whose contents came back wrong is a failed row: the figure of a copy that
    lost data is no figure. A row of ``known`` (--known-wrong: peer and stream) whose contents
    came back wrong is "known-wrong" instead, and one whose contents came back right fails: the
    defect the option names is not there."""
    for r in rows:
        wrong = int(r.get("wrong", 0) or 0)
        listed = (r["implementation"], r.get("stream")) in known
        if r["status"] != "ok" or (wrong <= 0 and not listed):
            continue
        entry = f"{r['implementation']}:{r.get('stream')}"
        if wrong <= 0:
            r["status"] = "failed"
            r["reason"] = (f"--known-wrong names {entry}, but its contents came back right: the "
                           "defect is not there (take it off --known-wrong)")
            continue
        unit = "byte(s) of the region" if r["feature"] == "region" else \
            "bf16 element(s) of the saved tensors"
        of = f" of {r['bytes'] // (1 if r['feature'] == 'region' else 2)}" if r.get("bytes") \
            else ""
        r["status"] = "known-wrong" if listed else "failed"
        r["reason"] = (f"contents came back wrong: {wrong}{of} {unit} differ after the timed "
                       "rounds" + (f" (a known defect, --known-wrong {entry})" if listed else ""))


# ---- offloadkit's own rows, from its C++ benchmarks -------------------------------------------


def find_program(given: Optional[str], folder: str, name: str) -> Tuple[Optional[str], str]:
    if given is not None:
        return (given, "") if os.access(given, os.X_OK) else (
            None, f"{given} is not an executable file")
    looked = [os.path.join(ROOT, b, "bench", folder, name) for b in ("build-gpu", "build")]
    for path in looked:
        if os.access(path, os.X_OK):
            return path, ""
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name), ""
    return None, (f"{name} not found (looked in {', '.join(looked)} and PATH): build it, or name "
                  f"it with --{name.replace('_', '-')}")


def run_program(command: List[str]) -> Tuple[Optional[Dict[str, Any]], str]:
    """Runs one of offloadkit's benchmarks with --json; (its document, "") or (None, why not: the
    reason its document gives for skipping, or its exit status and last lines)."""
    progress("running " + " ".join(command))
    with tempfile.TemporaryDirectory(prefix="bench_peers-") as tmp:
        path = os.path.join(tmp, "out.json")
        done = subprocess.run(command + ["--json", path], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        sys.stderr.write(done.stdout)
        if done.returncode != 0 or not os.path.isfile(path):
            tail = " | ".join(done.stdout.strip().splitlines()[-3:])
            return None, f"{' '.join(command)} exited with status {done.returncode}: {tail}"
        with open(path) as f:
            doc = json.load(f)
        if doc.get("skipped"):
            return None, f"{os.path.basename(command[0])}: skipped: {doc['skipped']}"
        return doc, ""


def offloadkit_region(o: argparse.Namespace) -> List[Dict[str, Any]]:
    impl = OFFLOADKIT_CPP
    program, why = find_program(o.bench_region, "region", "bench_region")
    doc = None
    if program is not None:
        low, high = (8, 16) if o.quick else (o.min_mib, o.max_mib)
        doc, why = run_program([program, "--executor", o.offloadkit_executor,
                                "--min-mib", str(low), "--max-mib", str(high),
                                "--reps", str(2 if o.quick else o.reps),
                                "--baseline-max-mib", "0"] + (["--chunk-mib", "4"] if o.quick
                                                              else []))
    by_size = {r["bytes"]: r for r in (doc or {}).get("rows", [])}
    rows = []
    for nbytes in sizes(o):
        common = {"bytes": nbytes, "source": "bench_region",
                  "executor": (doc or {}).get("executor", o.offloadkit_executor)}
        r = by_size.get(nbytes)
        if r is None:
            reason = why or f"bench_region measured no row of {nbytes // MIB} MiB (see its output)"
            for op in ("pause", "resume", "phase switch"):
                rows.append(skipped("region", op, impl, reason, **common))
            continue
        rows.append(row("region", "pause", impl, **measure.figure(r["pause_s"], r["d2h_s"]),
                        wrong=r["wrong"], **common))
        rows.append(row("region", "resume", impl, **measure.figure(r["resume_s"], r["h2d_s"]),
                        wrong=r["wrong"], **common))
        if r.get("swap_s", 0) > 0:
            rows.append(row("region", "phase switch", impl,
                            **measure.figure(r["swap_s"], r["both_directions_s"]),
                            wrong=r["wrong"], **common))
        else:
            rows.append(skipped("region", "phase switch", impl,
                                "bench_region skipped the swap at this size (see its output)",
                                **common))
    return rows


def offloadkit_activation(o: argparse.Namespace) -> List[Dict[str, Any]]:
    impl = OFFLOADKIT_CPP
    program, why = find_program(o.bench_activation_mlp, "activation", "bench_activation_mlp")
    doc = None
    if program is not None:
        command = [program, "--executor", o.offloadkit_executor, "--blocks", str(o.blocks)]
        if o.shape is not None:
            command += ["--shape", f"{o.shape[0]}x{o.shape[1]}"]
        elif o.quick:
            command += ["--quick"]
        doc, why = run_program(command)
    by_shape = {(r["h"], r["tokens"]): r for r in (doc or {}).get("rows", [])}
    rows = []
    for hidden, tokens in shapes(o):
        r = by_shape.get((hidden, tokens))
        common = {"hidden": hidden, "tokens": tokens, "blocks": o.blocks,
                  "source": "bench_activation_mlp"}
        if r is None:
            reason = why or f"bench_activation_mlp measured no row of {hidden}x{tokens}"
            for op in ("forward", "backward"):
                rows.append(skipped("activation", op, impl, reason, **common))
            continue
        for op in ("forward", "backward"):
            phase = r[op]
            # The phase with the step's GEMMs against its copy floor (the same tensors copied
            # plainly, measured next to it); bench_activation_mlp's own ratio is to max(the phase
            # without offload, that floor).
            rows.append(row("activation", op, impl, bytes=int(r["saved_bytes"]),
                            **measure.figure(phase["offload_s"], phase["floor_s"]),
                            limit_with_compute_ratio=phase["ratio"], wrong=r["wrong"],
                            **common))
    return rows


# ---- speed-ups, table, JSON ---------------------------------------------------------------


def add_speedups(rows: List[Dict[str, Any]]) -> None:
    """offloadkit's speed-up over each peer, per operation and size or shape: the ratio of the two
    fractions of the limit (each measured in the same run). offloadkit's C++ benchmarks' rows are
    neither compared nor compared with."""

    def key(r: Dict[str, Any]) -> Tuple[Any, ...]:
        return r["feature"], r["operation"], _where(r)

    ours = {key(r): r for r in rows if r["implementation"] == OFFLOADKIT and
            r["status"] == "ok"}
    for r in rows:
        if r["implementation"] in (OFFLOADKIT, OFFLOADKIT_CPP) or r["status"] != "ok":
            continue
        mine = ours.get(key(r))
        if mine is not None and r["of_limit"] > 0:
            speedup = mine["of_limit"] / r["of_limit"]
            r["offloadkit_speedup"] = speedup
            mine.setdefault("speedup_over", {})[r["implementation"]] = speedup


def cell(value: Any, fmt: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else \
        format(value, fmt)


def table(rows: List[Dict[str, Any]]) -> str:
    lines = ["| feature | operation | size / shape | implementation | ms | limit ms | of limit | "
             "offloadkit × | #wrong | note |", "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        where = (f"{r['bytes'] // MIB} MiB" if r["feature"] == "region" else
                 f"h={r['hidden']} t={r['tokens']} ({r['bytes'] / 1e9:.2f} GB)"
                 if r["feature"] == "activation" and "hidden" in r and "bytes" in r else
                 f"h={r.get('hidden')} t={r.get('tokens')}" if r["feature"] == "activation"
                 else "–")
        if r.get("stream") == "default":
            where += ", default stream"
        ok_row = r["status"] == "ok"
        note = r.get("reason", "") if not ok_row else (
            f"from {r['source']} ({r.get('executor', 'cuda')})" if r.get("source") else
            ", ".join(f"{k} {v}" for k, v in sorted(r.get("calls", {}).items())))
        if not ok_row:
            note = f"{r['status']}: {note}"
        lines.append("| " + " | ".join([
            r["feature"], r["operation"], where, r["implementation"],
            cell(r["time_s"] * 1e3, ".2f") if ok_row else "–",
            cell(r["limit_s"] * 1e3, ".2f") if ok_row else "–",
            cell(r["of_limit"], ".3f") if ok_row else "–",
            cell(r.get("offloadkit_speedup"), ".2f") if ok_row else "–",
            str(r.get("wrong", "–")) if ok_row else "–",
            note.replace("|", "\\|").replace("\n", " ")]) + " |")
    return "\n".join(lines)


def header(device: str, o: argparse.Namespace) -> str:
    return (f"# bench_peers on {device}, median of {o.reps if not o.quick else 2} rounds; "
            "'of limit' = limit time / time (1.00: at the link's limit), the limit being a plain "
            "pinned copy of the same bytes measured in the same run (each direction; both at once "
            "for the phase switch; by this program with torch, offloadkit-c++'s by its own "
            "benchmark); 'offloadkit ×' = offloadkit's fraction of its limit / the peer's")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser()
    o = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    check_values(p, o)
    if o.quick:
        o.reps = min(o.reps, 2)
    if o.peer_worker is not None:
        return worker_main(o)
    if o.json:
        try:  # a file that cannot be written fails the run before it is measured
            with open(o.json, "w") as f:
                f.write("{}\n")
        except OSError as e:
            sys.stderr.write(f"bench_peers: --json {o.json}: cannot write the file: {e}\n")
            return 1
    started = time.time()
    rows: List[Dict[str, Any]] = []
    machine: Dict[str, Any] = {}
    torch, why, dev = None, "", None  # the parent imports no PyTorch unless --in-process
    if o.in_process:
        torch, why = load_torch()
        dev = measure.Device(torch) if torch is not None else None
        machine = {"device": dev.name if dev is not None else None,
                   "torch": getattr(torch, "__version__", None)}

    def peers(feature: str, table: Sequence[Tuple[str, str]]) -> None:
        """Each peer's rows into ``rows`` as soon as it is measured."""
        for name, factory in table:
            if o.in_process:
                measure_peer = region_peer if feature == "region" else activation_peer
                rows.extend(measure_peer(o, torch, why, dev, name, factory))
                continue
            peer_rows, said = run_peer(o, feature, name, factory)
            rows.extend(peer_rows)
            for key in ("device", "torch"):
                if said.get(key) and not machine.get(key):
                    machine[key] = said[key]

    interrupted: Optional[Interrupted] = None
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)
    try:
        cpp = not o.no_offloadkit and not o.no_cpp_benchmarks
        if o.feature in ("region", "all"):
            peers("region", peer_table(o, REGION_PEERS))
            if cpp:
                rows += offloadkit_region(o)
        if o.feature in ("activation", "all"):
            peers("activation", peer_table(o, ACTIVATION_PEERS))
            if cpp:
                rows += offloadkit_activation(o)
        if o.feature == "all":
            rows.append(megatron_row())
    except Interrupted as e:
        interrupted = e
        progress(f"stopped by {e}: the table and --json keep the {len(rows)} row(s) measured "
                 "so far")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
    if interrupted is not None:
        rows += not_measured(o, rows, f"not measured: the run was stopped by {interrupted}")
    device = machine.get("device") or "(no GPU through PyTorch)"
    judge_contents(rows, o.known_wrong)
    add_speedups(rows)
    print(header(device, o))
    print()
    print(table(rows))
    wrong = sum(int(r.get("wrong", 0) or 0) for r in rows if r["status"] != "known-wrong")
    failures = sum(1 for r in rows if r["status"] == "failed")
    print(f"\n{sum(r['status'] == 'ok' for r in rows)} measured, "
          f"{sum(r['status'] == 'skipped' for r in rows)} skipped, {failures} failed, "
          f"{sum(r['status'] == 'known-wrong' for r in rows)} known-wrong; #wrong {wrong}")
    for name in dict.fromkeys(r["implementation"] for r in rows if r.get("shutdown")):
        said = next(r["shutdown"] for r in rows if r["implementation"] == name and
                    r.get("shutdown"))
        print(f"shutdown: {name}: {said} (its rows stand)")
    status = 1 if wrong or failures else 0
    if interrupted is not None:
        print(f"interrupted: stopped by {interrupted}; the rows not measured say so")
        status = 128 + interrupted.signum
    if o.json:
        doc = {"benchmark": "peers", "device": device,
               "torch": machine.get("torch"), "command": " ".join(
                   [os.path.basename(sys.argv[0] or "bench_peers.py")] + list(
                       sys.argv[1:] if argv is None else argv)),
               "rounds": o.reps, "statistic": "median", "of_limit": "limit_s / time_s",
               "wall_s": time.time() - started,
               "interrupted": str(interrupted) if interrupted is not None else None,
               "rows": rows}
        try:
            with open(o.json, "w") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
        except OSError as e:
            sys.stderr.write(f"bench_peers: --json {o.json}: cannot write the file: {e}\n")
            return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
