"""``python -m offloadkit list-cases`` says of each property whether it reads the device's free
memory (``reads_free_memory``, what ``python -m offloadkit ecosystem`` runs alone), and says it
as ``python -m offloadkit check --free-memory only|without --list`` picks them, for each of the
planted NumPy factories (one per feature).

    python list_cases_free_memory.py EXAMPLES_DIR

Exit status 0 when they agree for every factory and at least one property of each side exists;
1 otherwise, naming the factory, the property and both answers."""

import json
import re
import subprocess
import sys

FEATURES = ("stash", "region", "arena", "activation")
ROW = re.compile(r"^  (\w+)/\S+ (\w+) \(")


def listed(factory):
    done = subprocess.run([sys.executable, "-m", "offloadkit", "list-cases", factory,
                           "--executor", "host"], capture_output=True, text=True, check=True)
    cases = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
    return {(c["feature"], c["name"]): c["reads_free_memory"] for c in cases}


def picked(factory, side):
    done = subprocess.run([sys.executable, "-m", "offloadkit", "check", factory, "--executor",
                           "host", "--free-memory", side, "--list"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"check {factory} --free-memory {side} --list: exit {done.returncode}\n"
                 f"{done.stdout}{done.stderr}")
    return {m.groups() for m in map(ROW.match, done.stdout.splitlines()) if m}


def main(examples):
    problems, sides = [], {True: 0, False: 0}
    for feature in FEATURES:
        factory = f"{examples}/numpy_planted.py:{feature}"
        said = listed(factory)
        only, without = picked(factory, "only"), picked(factory, "without")
        for key, reads in sorted(said.items()):
            sides[reads] += 1
            if (key in only, key in without) != (reads, not reads):
                problems.append(f"{factory}: {key[0]}/{key[1]}: list-cases says "
                                f"reads_free_memory={reads}; check lists it under "
                                f"--free-memory {'only' if key in only else 'without'}")
        for key in (only | without) - set(said):
            problems.append(f"{factory}: {key[0]}/{key[1]}: listed by check, not by list-cases")
    if not sides[True] or not sides[False]:
        problems.append(f"one side is empty: {sides[True]} readers, {sides[False]} others")
    print(f"{sides[True]} properties read free memory, {sides[False]} do not")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
