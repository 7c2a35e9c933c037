#!/usr/bin/env python3
"""Checks that an interpreter can import every module the tests' Python imports.

The modules are read from the scripts themselves (their `import` statements, the
standard library left out), so a script that starts importing a module cannot be
forgotten here:

  check_python.py             the `python3` first on PATH: every script under
                              tests/helpers/ (installed from requirements.txt)
  check_python.py --crawler   Debian's /usr/bin/python3, which the transparent tests
                              run as the unprivileged crawler uid (65534, which cannot
                              read a pyenv or venv under /root): the scripts under
                              tests/helpers/crawler/ (installed as Debian packages:
                              scripts/deps.sh's DEBIAN_PYTHON list)

Exits 1 naming the interpreter and each missing module, with the package to install.
"""
import ast
import importlib
import pathlib
import sys

HELPERS = pathlib.Path(__file__).resolve().parent
# The Python the Rust tests write inline (`python3 -c`) imports these as well.
INLINE = {"requests", "cryptography"}
# Top-level module -> PyPI distribution, where the names differ.
PYPI = {"http_message_signatures": "http-message-signatures"}
# Top-level module -> Debian package, where it is not `python3-<module>`.
DEBIAN = {}


def imported(script: pathlib.Path) -> set[str]:
    """The top-level modules `script` imports, the standard library and its own left out."""
    tree = ast.parse(script.read_text(), str(script))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    local = {p.stem for p in script.parent.glob("*.py")}
    return {n for n in names if n not in sys.stdlib_module_names and n not in local}


def wanted(crawler: bool) -> dict[str, str]:
    """Module -> the package that provides it, for the suite or for the crawler."""
    if crawler:
        scripts = sorted((HELPERS / "crawler").glob("*.py"))
        modules = set().union(*(imported(s) for s in scripts))
        return {m: DEBIAN.get(m, f"python3-{m.replace('_', '-')}") for m in sorted(modules)}
    scripts = sorted(HELPERS.rglob("*.py"))
    modules = INLINE.union(*(imported(s) for s in scripts))
    return {m: PYPI.get(m, m) for m in sorted(modules)}


def missing(modules: dict[str, str]) -> dict[str, str]:
    """The modules of `modules` this interpreter cannot import, with why."""
    gone = {}
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # an ImportError, or a broken install
            gone[module] = f"{type(e).__name__}: {e}"
    return gone


def main() -> int:
    modules = wanted("--crawler" in sys.argv[1:])
    gone = missing(modules)
    if gone:
        why = "; ".join(f"{m} (install {modules[m]}: {e})" for m, e in gone.items())
        print(f"{sys.executable} cannot import: {why}", file=sys.stderr)
        print("run scripts/deps.sh with this python3 first on PATH", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
