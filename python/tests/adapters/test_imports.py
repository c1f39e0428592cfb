"""The offloadkit package has no import circle: no module of it imports, at its top or inside a
function, a module that imports it back (directly or through others). A circle makes the order
of imports matter and leaves half-initialised modules to whichever imports first."""

import ast
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
PACKAGE = os.path.join(ROOT, "python", "offloadkit")


def module_name(path):
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-len(".py")].split(os.sep)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel)


def imports_of(path, name, known):
    """The package's modules that the module ``name`` (file ``path``) imports."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import x` names a module, `from .m import f` not
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def package_graph():
    files = {}
    for folder, _, names in os.walk(PACKAGE):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(folder, n)
                files[module_name(path)] = path
    return {name: imports_of(path, name, files) for name, path in files.items()}


def circles(graph):
    """Each circle once, as the list of modules around it."""
    out, seen = [], set()

    def visit(node, stack):
        for nxt in sorted(graph[node]):
            if nxt in stack:
                circle = stack[stack.index(nxt):]
                key = frozenset(circle)
                if key not in seen:
                    seen.add(key)
                    out.append(circle + [nxt])
            elif len(stack) < len(graph):
                visit(nxt, stack + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    return out


class ImportCircleTest(unittest.TestCase):
    def test_the_package_has_no_import_circle(self):
        graph = package_graph()
        self.assertIn("offloadkit.ecosystem", graph["offloadkit.cli"])
        self.assertEqual(circles(graph), [])

    def test_a_circle_is_found(self):
        self.assertEqual(circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}),
                         [["a", "b", "c", "a"]])


if __name__ == "__main__":
    unittest.main()
