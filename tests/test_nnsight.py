"""A library idiom from outside: models wrapped by nnsight 0.8 (NNsight(model)), compiled whole.
nnsight's Envoy installs a controller object as each module's forward, holding the module by a
weakref and reading the module's __dict__: pydynamo must give one graph where torch.compile
does, with fullgraph=True too, and compile a second wrapped model in the same process.

Importing nnsight patches torch for the whole process (Tensor.backward, Tensor.save and
Tensor.__torch_function__), so the programs run in a subprocess (tests/_nnsight_worker.py)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nnsight") is None, reason="needs nnsight")


@pytest.fixture(scope="module")
def results():
    worker = os.path.join(os.path.dirname(__file__), "_nnsight_worker.py")
    done = subprocess.run([sys.executable, worker], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["mlp-breaks", "mlp-full", "gpt2-breaks", "gpt2-full"])
def test_nnsight_model_one_graph_like_torch_compile(results, name):
    r = results[name]
    assert r["equal"]
    assert r["ours"] == r["theirs"] == 1
    assert r["breaks"] == 0


def test_a_second_nnsight_model_still_compiles(results):
    assert results["second"] == [[1, True], [1, True]]
