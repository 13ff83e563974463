"""The `private_names` import contract (tests/support/import_contracts.py) on a small package
written for the test: an underscore name may be imported from inside the package that defines
it, never from outside; underscore modules of the package itself and dunders are not its
business; an installed package's underscore modules and names only by a declared shim."""

from __future__ import annotations

import importlib
from pathlib import Path

import grimp
import pytest

from tests.support.import_contracts import PrivateNameImport, PrivateNamesContract

FILES = {
    "demo_pkg/__init__.py": "",
    "demo_pkg/inner/__init__.py": "_package_secret = 1\n",
    "demo_pkg/inner/defs.py": "_secret = 1\n__version__ = '1'\npublic = 2\n",
    "demo_pkg/inner/_hidden.py": "value = 3\n",
    "demo_pkg/inner/sibling.py": "from .defs import _secret\nfrom . import _package_secret\n",
    "demo_pkg/inner/deeper/__init__.py": "",
    "demo_pkg/inner/deeper/user.py": "from demo_pkg.inner.defs import _secret\n",
    "demo_pkg/outside.py": (
        "from demo_pkg.inner.defs import __version__, public\n"
        "from demo_pkg.inner import _hidden\n"
        "def later() -> None:\n"
        "    from .inner.defs import _secret\n"
        "    import json._hidden_module\n"
    ),
    "demo_pkg/other.py": (
        "from demo_pkg.inner import _package_secret\nfrom json import _default_decoder, loads\n"
    ),
    "demo_pkg/shim.py": "from json import _default_decoder\n",
}


def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[PrivateNameImport]:
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    graph = grimp.build_graph("demo_pkg", cache_dir=None)
    contract = PrivateNamesContract(
        name="names",
        session_options={},
        contract_options={
            "source_modules": ["demo_pkg"],
            "packages_with_private_names": ["demo_pkg"],
            "external_packages": ["json"],
            "shims": ["demo_pkg.shim"],
        },
    )
    result = contract.check(graph, verbose=False)
    found: list[PrivateNameImport] = result.metadata["imports"]
    assert result.kept is (not found)
    return found


def test_only_imports_from_outside_the_owning_package_break_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = check(tmp_path, monkeypatch)
    assert sorted(found, key=lambda f: (f.importer, f.line)) == [
        # a name of module demo_pkg.inner.defs belongs to package demo_pkg.inner
        PrivateNameImport("demo_pkg.other", "demo_pkg.inner", "_package_secret", 1),
        # an installed package's underscore name or module, outside the declared shim
        PrivateNameImport("demo_pkg.other", "json", "_default_decoder", 2),
        PrivateNameImport("demo_pkg.outside", "demo_pkg.inner.defs", "_secret", 4),
        PrivateNameImport("demo_pkg.outside", "json._hidden_module", "", 5),
    ]
