"""An import-linter contract for the names a module keeps to itself: `from a.b.c import _name`.

import-linter's own `private_modules` contract covers underscore modules (`a.b._c`); it cannot
see an underscore name imported from a public module, because the import graph records modules,
not names. This contract reads the importing modules' source for those: an underscore name
(`_name`, not a dunder) defined in module `a.b.c` belongs to the package `a.b` (to `a.b.c`
itself when `a.b.c` is a package), and may be imported only from inside that package. An
underscore name that is a module is left to `private_modules`. The graph sees an installed
package only as a whole, so the same reading checks the underscore modules and names of the
installed packages listed (a private API of a dependency is used only through a declared shim).

Configuration (in `[[tool.importlinter.contracts]]`, `type = "private_names"`):

- `source_modules`: the packages whose imports are read (their descendants too);
- `packages_with_private_names`: the packages whose underscore names are checked;
- `external_packages` (optional): installed packages whose underscore modules and names no
  source module imports, except
- `shims` (optional): the modules allowed to import them (each one place that adapts to a
  private API, with a test that fails when it changes).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.imports import Module


@dataclass(frozen=True)
class PrivateNameImport:
    importer: str
    imported: str
    name: str
    line: int


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


class PrivateNamesContract(Contract):
    """No module imports another package's underscore names, nor an external package's
    underscore modules or names outside its declared shims."""

    type_name = "private_names"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    packages_with_private_names = fields.ListField(subfield=fields.ModuleField())
    external_packages = fields.ListField(subfield=fields.StringField(), required=False)
    shims = fields.ListField(subfield=fields.ModuleField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources: list[Module] = self.source_modules  # type: ignore[assignment]
        targets: list[Module] = self.packages_with_private_names  # type: ignore[assignment]
        external: list[str] = self.external_packages or []  # type: ignore[assignment]
        shims: list[Module] = self.shims or []  # type: ignore[assignment]
        checked = [module.name for module in targets]
        allowed = {module.name for module in shims}
        found: list[PrivateNameImport] = []
        for source in sources:
            for importer in sorted({source.name} | graph.find_descendants(source.name)):
                found.extend(
                    found_import
                    for found_import in private_name_imports(importer, graph)
                    if any(within(found_import.imported, package) for package in checked)
                )
                if importer not in allowed:
                    found.extend(external_private_imports(importer, external))
        return ContractCheck(kept=not found, metadata={"imports": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error(
            "Underscore names may only be imported from inside the package that defines them"
            " (an external package's, only by a declared shim):",
            bold=False,
        )
        output.new_line()
        for found in check.metadata["imports"]:
            target = f"{found.imported}.{found.name}" if found.name else found.imported
            output.print_error(f"- {found.importer} -> {target} (l.{found.line})", bold=False)
            output.new_line()


def imports_in(importer: str) -> Iterator[tuple[str, str, int]]:
    """(absolute module, imported name or "" for `import module`, line) for every import
    statement in `importer`, functions' included."""
    path, is_package = source_of(importer)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            imported = absolute(importer, is_package, node.level, node.module)
            for alias in node.names:
                yield imported, alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno


def private_name_imports(importer: str, graph: grimp.ImportGraph) -> list[PrivateNameImport]:
    """Every `from M import _name` in `importer` whose `_name` is not a module and whose owning
    package does not contain `importer`."""
    found: list[PrivateNameImport] = []
    for imported, name, line in imports_in(importer):
        if not is_private(name) or f"{imported}.{name}" in graph.modules:
            continue
        a_package = imported in graph.modules and source_of(imported)[1]
        owner = imported if a_package else imported.rpartition(".")[0] or imported
        if not within(importer, owner):
            found.append(PrivateNameImport(importer, imported, name, line))
    return found


def external_private_imports(importer: str, external: list[str]) -> list[PrivateNameImport]:
    """Every import in `importer` of an underscore module or name of an `external` package."""
    return [
        PrivateNameImport(importer, imported, name, line)
        for imported, name, line in imports_in(importer)
        if imported.partition(".")[0] in external
        and (any(is_private(part) for part in imported.split(".")) or is_private(name))
    ]


def source_of(module: str) -> tuple[Path, bool]:
    """The file of `module` (found from its top-level package, so nothing is imported) and
    whether it is a package."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise LookupError(f"no source for {module}")
    base = Path(spec.origin).parent
    folder = base.joinpath(*rest.split(".")) if rest else base
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py", True
    return folder.with_suffix(".py"), False


def absolute(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name a (possibly relative) `from ... import` names."""
    if level == 0:
        return module or ""
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)
