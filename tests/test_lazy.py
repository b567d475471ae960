"""scheda.utils.lazy: a module named at import, imported at its first use, then a plain global."""

import subprocess
import sys

import pytest

from scheda.utils.lazy import lazy, no_grad


def test_the_first_use_imports_the_module_and_puts_it_in_place_of_the_stand_in():
    namespace = {}
    namespace["json"] = lazy("json", namespace)
    assert "imported on first use" in repr(namespace["json"])
    assert namespace["json"].dumps([1]) == "[1]"
    import json

    assert namespace["json"] is json  # later reads are the module itself
    namespace["F"] = lazy("os.path", namespace, "F")
    assert namespace["F"].join("a", "b") == "a/b" and namespace["F"].__name__ == "posixpath"


def test_a_missing_name_or_module_raises_as_an_import_would():
    namespace = {}
    namespace["json"] = lazy("json", namespace)
    with pytest.raises(AttributeError):
        namespace["json"].no_such_function
    namespace["nothing"] = lazy("scheda_no_such_module", namespace)
    with pytest.raises(ModuleNotFoundError):
        namespace["nothing"].anything


def test_no_grad_imports_torch_only_when_the_function_runs():
    code = ("import sys\nfrom scheda.utils.lazy import no_grad\n"
            "@no_grad\ndef f(x):\n    import torch\n    return torch.is_grad_enabled()\n"
            "print('torch' in sys.modules)\nprint(f(1))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
    assert no_grad(lambda: 3)() == 3
