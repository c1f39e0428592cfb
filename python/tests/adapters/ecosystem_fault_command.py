"""The command line ``python -m offloadkit ecosystem --driver-faults`` gives each library's
driver-fault countdown is one the check accepts: run as the ecosystem builds it (with --cases and
--timeout given to the ecosystem), it must get past the check's options and stop only where the
cuda back end cannot run (CUDA_VISIBLE_DEVICES is emptied, so exit status 3 on any machine), never
at bad usage (2: "--cases ... do not apply to it"), which left every library's fault column "not
checked" while the stand-in tests never reached the countdown.

    python ecosystem_fault_command.py FACTORY    (in an interpreter with offloadkit._native)
"""

import argparse
import os
import subprocess
import sys
import tempfile

from offloadkit import ecosystem


def main() -> int:
    factory = sys.argv[1]
    options = argparse.Namespace(cases=3, timeout=60)
    with tempfile.TemporaryDirectory(prefix="ecosystem-faults-") as out:
        commands = {
            "properties": ecosystem.check_command(factory, options, "cuda", [],
                                                  os.path.join(out, "x.json")),
            "driver faults": ecosystem.check_command(factory, options, "cuda",
                                                     ["--driver-faults"],
                                                     os.path.join(out, "x-faults.json")),
        }
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        failed = []
        for what, command in commands.items():
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
            said = (done.stdout + done.stderr).strip()
            print(f"{what}: {' '.join(command)}\n  exit {done.returncode}: {said[-400:]}")
            if done.returncode != 3 or "cuda" not in said:
                failed.append(f"{what}: exit {done.returncode}, expected 3 (the cuda executor "
                              f"cannot run here) from the check's own refusal of the executor")
        if "--cases=3" not in commands["properties"]:
            failed.append("the properties' check lost --cases")
    for f in failed:
        print("FAILED: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
