"""Rewrite imports of the old model modules to ``leasehold.lease.api`` (issue 26; one-off).

Why this exists: ``leasehold.lease.models``, ``leasehold.lease.cronmodels`` and
``leasehold.lease.crds`` became the package ``leasehold.lease.api`` (one module
per kind) while other branches still import the old modules. This script makes
that rewrite mechanical, so it can be run again on any tree (a branch before or
after it merges) instead of being redone by hand. It is idempotent: a tree
already rewritten is left as it is. Delete it once no branch needs it.

What it rewrites, in every ``.py`` file under the given paths (default:
``operator tests bench examples hack``):

* ``from leasehold.lease.models import A, B as C`` (and ``cronmodels``; any
  layout, parenthesised over several lines too): each name to its new home,
  ``leasehold.lease.api`` for the public ones (the package re-exports them),
  the defining module for private ones, and the module a name was only
  re-exported from before (``MAX_MESSAGE_LENGTH``: ``leasehold.lease.leaseops``);
* ``from leasehold.lease import models`` / ``cronmodels`` (possibly among other
  names, possibly ``as x``): the module becomes ``from leasehold.lease import
  api``, and each ``models.Foo`` / ``cronmodels.Foo`` in the code becomes
  ``api.Foo`` (``lease_api`` where the file already binds ``api``); a name with
  a home outside the package is imported by name instead;
* ``import leasehold.lease.models`` and dotted references
  ``leasehold.lease.models.Foo`` in code, docstrings and comments;
* ``leasehold.lease.crds`` in any of these forms: ``leasehold.lease.api.crds``;
* in ``pyproject.toml``: the module names in the import-linter contracts.

Then ``ruff check --fix`` and ``ruff format`` tidy the files it changed (the
import order, and ``from leasehold.lease.api import ...`` statements merged).
It stops without writing anything when a name has no known home.

Usage (from the repository root)::

    python hack/rewrite_model_imports.py            # rewrite, then ruff
    python hack/rewrite_model_imports.py --check    # list what would change; exit 1 if any
    python hack/rewrite_model_imports.py --no-ruff tests/unit   # some paths only, no ruff
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
API_DIR: Final = REPO / "operator" / "leasehold" / "lease" / "api"
DEFAULT_PATHS: Final = ("operator", "tests", "bench", "examples", "hack")

API: Final = "leasehold.lease.api"
CRDS_OLD: Final = "leasehold.lease.crds"
CRDS_NEW: Final = "leasehold.lease.api.crds"
TYPES_OLD: Final = ("leasehold.lease.models", "leasehold.lease.cronmodels")
OLD_SHORT: Final = {"models", "cronmodels", "crds"}

MOVED_OUT: Final = {
    # Names the old modules only re-exported or imported: their own homes.
    "MAX_MESSAGE_LENGTH": ("leasehold.lease.leaseops", "MAX_MESSAGE_LENGTH"),
    "Outcome": ("leasehold.lease.protocol", "Outcome"),
    "MACROS": ("leasehold.lease.schedule", "MACROS"),
    "MAX_SCHEDULE_LENGTH": ("leasehold.lease.schedule", "MAX_SCHEDULE_LENGTH"),
    # Renamed when it became shared.
    "_Model": ("leasehold.lease.api.common", "ApiModel"),
}


class RewriteError(Exception):
    """A construct the script will not guess about; fix it by hand and run again."""


def _top_level_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def name_homes() -> dict[str, tuple[str, str]]:
    """Map each name the old modules had to ``(module, name)``: its new home.

    Read from the source of ``leasehold.lease.api`` (nothing is imported): the
    names ``__init__`` re-exports live at ``leasehold.lease.api``; any other
    name at module level of a kind module lives in that module.
    """
    if not (API_DIR / "__init__.py").is_file():
        raise RewriteError(
            f"{API_DIR.relative_to(REPO)} is missing: run this on a tree that has it"
        )
    homes: dict[str, tuple[str, str]] = dict(MOVED_OUT)
    for path in sorted(API_DIR.glob("*.py")):
        if path.name in ("__init__.py", "crds.py"):
            continue
        for name in _top_level_names(ast.parse(path.read_text(), str(path))):
            homes.setdefault(name, (f"{API}.{path.stem}", name))
    init = ast.parse((API_DIR / "__init__.py").read_text())
    for node in init.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                homes[alias.asname or alias.name] = (API, alias.asname or alias.name)
    return homes


# --------------------------------------------------------------------------
# One file


@dataclass
class _Edit:
    """Replace the text from (line, col) to (end_line, end_col) (0-based, characters)."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str


@dataclass
class _FileRewrite:
    path: Path
    lines: list[str]
    homes: dict[str, tuple[str, str]]
    edits: list[_Edit] = field(default_factory=list)
    module_aliases: dict[str, str] = field(default_factory=dict)  # old bound name -> new one

    def where(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', '?')}"

    def char_col(self, line: int, byte_col: int) -> int:
        """A character column from the AST's UTF-8 byte column (``line`` is 1-based)."""
        return len(self.lines[line - 1].encode()[:byte_col].decode())

    def home(self, name: str, node: ast.AST) -> tuple[str, str]:
        if name == "*":
            raise RewriteError(f"{self.where(node)}: star import of an old model module")
        if name not in self.homes:
            raise RewriteError(f"{self.where(node)}: no known home for {name!r}")
        return self.homes[name]

    def replace_node(self, node: ast.stmt, statements: list[str]) -> None:
        """Replace an import statement by ``statements`` (one per line, same indentation)."""
        assert node.end_lineno is not None and node.end_col_offset is not None
        first = self.lines[node.lineno - 1]
        col = self.char_col(node.lineno, node.col_offset)
        end_col = self.char_col(node.end_lineno, node.end_col_offset)
        inner = "\n".join(self.lines[node.lineno - 1 : node.end_lineno])
        if "#" in inner[col:] and node.end_lineno > node.lineno:
            raise RewriteError(f"{self.where(node)}: a comment inside the import; move it out")
        indent = first[:col]
        joiner = "\n" + indent if not indent.strip() else "; "
        self.edits.append(
            _Edit(node.lineno - 1, col, node.end_lineno - 1, end_col, joiner.join(statements))
        )


def _alias(name: str, asname: str | None) -> str:
    return f"{name} as {asname}" if asname and asname != name else name


def _bound_names(tree: ast.Module, skip: set[int]) -> set[str]:
    """Every name the file binds, but by the import statements at ``skip`` (ids)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound.update(node.names)
    return bound


def _is_old(module: str | None) -> bool:
    return module in (*TYPES_OLD, CRDS_OLD)


def rewrite_source(path: Path, text: str, homes: dict[str, tuple[str, str]]) -> str:
    """Return ``text`` with the old model modules' imports and uses rewritten.

    Raises:
        RewriteError: a form it will not guess about (star import, unknown name...).
    """
    if not any(old in text for old in (*TYPES_OLD, CRDS_OLD)) and not re.search(
        r"from\s+leasehold\.lease\s+import", text
    ):
        return text
    tree = ast.parse(text, str(path))
    rw = _FileRewrite(path, text.split("\n"), homes)

    ours: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if _is_old(node.module) or (
                node.module == "leasehold.lease" and {a.name for a in node.names} & OLD_SHORT
            ):
                ours.append(node)
        elif isinstance(node, ast.Import) and any(_is_old(a.name) for a in node.names):
            ours.append(node)
    if not ours:
        return _rewrite_dotted(text, homes)
    taken = _bound_names(tree, {id(n) for n in ours})
    api_name = "api" if "api" not in taken else "lease_api"
    if api_name in taken:
        raise RewriteError(f"{path}: binds both 'api' and 'lease_api'; rewrite it by hand")

    late: dict[int, list[str]] = {}  # statement id -> imports for names used as attributes
    for node in ours:
        statements: list[str] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in TYPES_OLD:
                    statements.append(f"import {_alias(API, alias.asname)}")
                    if alias.asname:
                        rw.module_aliases[alias.asname] = alias.asname
                elif alias.name == CRDS_OLD:
                    statements.append(f"import {_alias(CRDS_NEW, alias.asname)}")
                else:
                    statements.append(f"import {_alias(alias.name, alias.asname)}")
        elif node.module in TYPES_OLD:
            by_module: dict[str, list[str]] = {}
            for alias in node.names:
                module, name = rw.home(alias.name, node)
                by_module.setdefault(module, []).append(
                    _alias(name, alias.asname or (alias.name if name != alias.name else None))
                )
            statements = [f"from {m} import {', '.join(ns)}" for m, ns in by_module.items()]
        elif node.module == CRDS_OLD:
            names = ", ".join(_alias(a.name, a.asname) for a in node.names)
            statements = [f"from {CRDS_NEW} import {names}"]
        else:  # from leasehold.lease import ..., models, ...
            kept = [a for a in node.names if a.name not in OLD_SHORT]
            if kept:
                names = ", ".join(_alias(a.name, a.asname) for a in kept)
                statements.append(f"from leasehold.lease import {names}")
            types_alias = None
            for alias in node.names:
                if alias.name in ("models", "cronmodels"):
                    new = alias.asname or api_name
                    rw.module_aliases[alias.asname or alias.name] = new
                    types_alias = new
                elif alias.name == "crds":
                    statements.append(f"from {API} import {_alias('crds', alias.asname)}")
            if types_alias is not None:
                statements.append(f"from leasehold.lease import {_alias('api', types_alias)}")
        late[id(node)] = statements
    # Attribute uses of a module alias: `models.Phase` -> `api.Phase`.
    extra: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in rw.module_aliases
        ):
            module, name = rw.home(node.attr, node)
            assert node.end_lineno is not None and node.end_col_offset is not None
            if module == API:
                text_new = f"{rw.module_aliases[node.value.id]}.{name}"
            else:
                if name in taken:
                    raise RewriteError(f"{rw.where(node)}: {name!r} is bound here already")
                extra.append(f"from {module} import {name}")
                text_new = name
            rw.edits.append(
                _Edit(
                    node.lineno - 1,
                    rw.char_col(node.lineno, node.col_offset),
                    node.end_lineno - 1,
                    rw.char_col(node.end_lineno, node.end_col_offset),
                    text_new,
                )
            )
    for i, node in enumerate(ours):
        statements = late[id(node)]
        if i == 0:
            statements += sorted(set(extra))
        rw.replace_node(node, statements)

    lines = rw.lines
    for edit in sorted(rw.edits, key=lambda e: (e.line, e.col), reverse=True):
        head = lines[edit.line][: edit.col]
        tail = lines[edit.end_line][edit.end_col :]
        lines[edit.line : edit.end_line + 1] = (head + edit.text + tail).split("\n")
    return _rewrite_dotted("\n".join(lines), homes)


def _rewrite_dotted(text: str, homes: dict[str, tuple[str, str]]) -> str:
    """Dotted references in code, docstrings and comments."""

    def qualified(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in homes:
            return f"{API}.{name}"  # e.g. a docstring's attribute path; left readable
        module, new = homes[name]
        return f"{module}.{new}"

    old = r"(leasehold\.lease\.(?:models|cronmodels))"
    text = re.sub(old + r"\.([A-Za-z_]\w*)", qualified, text)
    text = re.sub(old + r"(?![\w.])", API, text)
    return re.sub(r"leasehold\.lease\.crds(?!\w)", CRDS_NEW, text)


def rewrite_pyproject(text: str) -> str:
    """The import-linter contracts' module names."""
    text = re.sub(r'"leasehold\.lease\.(?:models|cronmodels)"', f'"{API}"', text)
    return text.replace(f'"{CRDS_OLD}"', f'"{CRDS_NEW}"')


# --------------------------------------------------------------------------
# The tree


def _ruff() -> list[str]:
    venv = REPO / ".venv" / "bin" / "ruff"
    if venv.exists():
        return [str(venv)]
    found = shutil.which("ruff")
    return [found] if found else [sys.executable, "-m", "ruff"]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the tree; the exit code is 1 under ``--check`` when anything would change."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: all)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on changes")
    parser.add_argument("--no-ruff", action="store_true", help="do not run ruff afterwards")
    args = parser.parse_args(argv)

    paths = [p if p.is_absolute() else REPO / p for p in args.paths] or [
        REPO / p for p in DEFAULT_PATHS
    ]
    this = Path(__file__).resolve()
    files = sorted(
        {
            f.resolve()
            for p in paths
            for f in ([p] if p.is_file() else p.rglob("*.py"))
            if ".venv" not in f.parts and f.resolve() != this
        }
    )
    try:
        homes = name_homes()
        changed: dict[Path, str] = {}
        for path in files:
            text = path.read_text()
            new = rewrite_source(path.relative_to(REPO), text, homes)
            if new != text:
                changed[path] = new
    except (RewriteError, SyntaxError) as exc:
        print(f"rewrite_model_imports: {exc}; nothing written", file=sys.stderr)
        return 2
    pyproject = REPO / "pyproject.toml"
    if not args.paths and pyproject.is_file():
        text = pyproject.read_text()
        if rewrite_pyproject(text) != text:
            changed[pyproject] = rewrite_pyproject(text)

    for path in changed:
        print(path.relative_to(REPO))
    if args.check:
        return 1 if changed else 0
    for path, text in changed.items():
        path.write_text(text)
    python = [str(p) for p in changed if p.suffix == ".py"]
    if python and not args.no_ruff:
        subprocess.run([*_ruff(), "check", "--fix", "--quiet", *python], cwd=REPO, check=False)
        subprocess.run([*_ruff(), "format", "--quiet", *python], cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
