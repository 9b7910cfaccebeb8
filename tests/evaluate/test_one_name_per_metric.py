"""One name per metric in the evaluation and reference rooms (``dgsgld.evaluate``,
``dgsgld.posteriors``): no public name is two objects, no object has two public names, no
``__all__`` lists a name twice, and the flat ``dgsgld.evaluate`` namespace holds every metric of
its submodules."""

import importlib
import pkgutil
import subprocess
import sys
import types
from collections import defaultdict

import pytest

import dgsgld.evaluate
import dgsgld.posteriors

ROOMS = (dgsgld.evaluate, dgsgld.posteriors)


def _public_modules():
    """Each room and its public submodules."""
    for package in ROOMS:
        yield package
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                yield importlib.import_module(f"{package.__name__}.{info.name}")


def test_every_public_all_is_complete_and_without_duplicates():
    for module in _public_modules():
        names = getattr(module, "__all__", None)
        assert names is not None, f"{module.__name__} has no __all__"
        repeated = sorted({n for n in names if names.count(n) > 1})
        assert not repeated, f"{module.__name__}.__all__ lists {repeated} more than once"
        missing = [n for n in names if not hasattr(module, n)]
        assert not missing, f"{module.__name__}.__all__ names {missing}, which it lacks"


def test_no_name_is_two_functions_and_no_function_has_two_names():
    objects = defaultdict(dict)   # public name -> {id: where}
    names = defaultdict(set)      # id -> public names
    for module in _public_modules():
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType) or not callable(obj):
                continue  # constants (thresholds, bin counts) may share a value
            objects[name][id(obj)] = f"{module.__name__}.{name}"
            names[id(obj)].add(name)
    clashes = {name: sorted(where.values()) for name, where in objects.items() if len(where) > 1}
    assert not clashes, f"one name, several functions: {clashes}"
    aliases = sorted(sorted(n) for n in names.values() if len(n) > 1)
    assert not aliases, f"one function, several names: {aliases}"


def test_the_flat_namespace_holds_every_metric_of_the_submodules():
    # Plots stay in their submodule (they draw metrics rather than compute them).
    flat = dgsgld.evaluate
    for sub in ("distances", "stein", "diagnostics", "predictive", "streaming"):
        module = getattr(flat, sub)
        for name in module.__all__:
            assert name in flat.__all__, f"dgsgld.evaluate lacks {sub}.{name}"
            assert getattr(flat, name) is getattr(module, name)


@pytest.mark.slow  # fast twin:
# tests/posteriors/test_posteriors.py::test_bench_writes_the_sbc_cells_without_matplotlib
def test_importing_the_plots_does_not_import_matplotlib():
    # matplotlib is an optional extra: dgsgld.evaluate.plots imports it on first use only.
    code = ("import sys, dgsgld; from dgsgld.evaluate import plots; "
            "from dgsgld.evaluate.plots import agent_curves, plot_run; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "False"
