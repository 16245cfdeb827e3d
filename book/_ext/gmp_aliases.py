"""Resolve ``gmp.Name`` cross-references to where ``Name`` is defined.

The package exports its public names at the top level (``gmp.GmPLinear``), while the API
reference documents them in their modules (``gmp.layers.GmPLinear``). This lets prose and
docstrings use the short, public spelling.
"""

from __future__ import annotations

import importlib


def _defining_name(target: str) -> str | None:
    module_name, _, attr = target.rpartition(".")
    if not module_name.startswith("gmp"):
        return None
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        return None
    home = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not home or not qualname or f"{home}.{qualname}" == target:
        return None
    return f"{home}.{qualname}"


def _resolve(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    candidates = [target] + ([f"{node['py:module']}.{target}"] if node.get("py:module") else [])
    full = next((name for name in map(_defining_name, candidates) if name), None)
    if full is None:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(env, node.get("refdoc"), app.builder, node.get("reftype"), full, node, contnode)


def setup(app):
    app.connect("missing-reference", _resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
