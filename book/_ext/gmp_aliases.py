"""Resolve ``gmp.Name`` cross-references to where ``Name`` is defined.

The package exports its public names at the top level (``gmp.GmPLinear``), and a package of
gmp exports those of its modules (``gmp.results.Claim``), while the API reference documents
them in their modules (``gmp.layers.GmPLinear``, ``gmp.results.claims.Claim``). This lets
prose and docstrings use the short, public spelling, and a module's docstrings name what a
sibling module defines as the package exports it (``:func:`code_fingerprint``` in
``gmp.results.store``, as ``gmp.results.code_fingerprint``).
"""

from __future__ import annotations

import importlib
import inspect
import sys


def _candidates(target: str, module: str | None) -> list[str]:
    """``target`` as written, then in the current module and in each package above it."""
    parts = module.split(".") if module else []
    return [target] + [".".join([*parts[:end], target]) for end in range(len(parts), 0, -1)]


def _defining_names(target: str) -> list[str]:
    """The names under which the API reference may document the object ``target`` names: its module's
    name and its qualified name (then the attributes named after it), or for a module-level value
    (a constant) each module of gmp that holds that very value under that name."""
    if not target.startswith("gmp"):
        return []
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        break
    else:
        return []
    rest, home, found = parts[end:], None, True
    for index, attr in enumerate(rest):
        try:
            obj = getattr(obj, attr)
        except AttributeError:  # such as a dataclass field without a class-level default
            found = False
            break
        if inspect.isclass(obj) or inspect.isroutine(obj):
            home = (f"{obj.__module__}.{obj.__qualname__}", index)
    if home is not None:
        return [".".join([home[0], *rest[home[1] + 1:]])]
    if found and len(rest) == 1:
        return [f"{name}.{rest[0]}" for name, module in sorted(sys.modules.items())
                if name.startswith("gmp") and module is not None and getattr(module, rest[0], None) is obj]
    return []


def _resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    for candidate in _candidates(node.get("reftarget", ""), node.get("py:module")):
        for full in _defining_names(candidate):
            if full == node.get("reftarget"):
                continue
            found = domain.resolve_xref(env, node.get("refdoc"), app.builder, node.get("reftype"), full, node,
                                        contnode)
            if found is not None:
                return found
    return None


def setup(app):
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
