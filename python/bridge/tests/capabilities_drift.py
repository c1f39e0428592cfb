"""The capabilities written once: the C ABI's bits (plugin.h), the table the host, the check command
and the bridge read (offloadkit._native.capability_table(), plugin/src/capabilities.cpp) and the
Python protocol's names (offloadkit.protocol) must say the same, name for name and bit for bit.

    python capabilities_drift.py <plugin.h>

Exit status 0 when they agree; 1 with every difference, one a line."""

import re
import sys

from offloadkit import _native, protocol

FEATURES = ("stash", "region", "arena", "activation")


def header_bits(path):
    """{(feature, name): bit} of every OKIT_CAP_* and OKIT_<FEATURE>_CAP_* in plugin.h."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    bits = {}
    pattern = r"#define OKIT_(?:(STASH|REGION|ARENA|ACTIVATION)_)?CAP_([A-Z0-9_]+)\s+\(1ull << (\d+)\)"
    for feature, name, shift in re.findall(pattern, text):
        bits[(feature.lower() or "common", name.lower())] = 1 << int(shift)
    return bits


def main():
    problems = []
    header = header_bits(sys.argv[1])
    if not header:
        problems.append(f"{sys.argv[1]}: no capability bit found")
    table = [(f, n, b) for f, n, b, _ in _native.capability_table()]
    rows = {(f, n): b for f, n, b in table}
    for key, bit in sorted(header.items()):
        if key not in rows:
            problems.append(f"plugin.h has {key[0]} capability {key[1]} (bit {bit:#x}); the "
                            f"capability table has no row for it")
        elif rows[key] != bit:
            problems.append(f"{key[0]} capability {key[1]}: bit {bit:#x} in plugin.h, "
                            f"{rows[key]:#x} in the capability table")
    for key in sorted(set(rows) - set(header)):
        problems.append(f"the capability table has {key[0]} capability {key[1]}, plugin.h has no "
                        f"bit for it")
    names = {f: tuple(n for g, n, _ in table if g == f) for f in ("common",) + FEATURES}
    if tuple(protocol.COMMON_CAPABILITIES) != names["common"]:
        problems.append(f"offloadkit.protocol.COMMON_CAPABILITIES {protocol.COMMON_CAPABILITIES} "
                        f"!= the table's {names['common']}")
    if set(protocol.FEATURE_CAPABILITIES) != set(FEATURES):
        problems.append(f"offloadkit.protocol.FEATURE_CAPABILITIES has the features "
                        f"{sorted(protocol.FEATURE_CAPABILITIES)}, the table {sorted(FEATURES)}")
    for feature in FEATURES:
        ours = tuple(protocol.FEATURE_CAPABILITIES.get(feature, ()))
        if ours != names[feature]:
            problems.append(f"offloadkit.protocol.FEATURE_CAPABILITIES[{feature!r}] {ours} != the "
                            f"table's {names[feature]}")
    for line in problems:
        print(line)
    if not problems:
        print(f"capabilities agree: {len(table)} in plugin.h, the table and offloadkit.protocol")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
