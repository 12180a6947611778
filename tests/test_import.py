"""Importing tf_dp is lazy, and the accounting needs no TensorFlow."""

import json
import subprocess
import sys
import textwrap

import pytest

# The subprocesses below import these: named here so that the Bazel test
# depends on them (scripts/update_build_files.py reads the imports).
import tf_dp.analysis  # pylint: disable=unused-import
import tf_dp.cli  # pylint: disable=unused-import

BLOCK_TF = textwrap.dedent("""
    import sys

    class _Blocker:
      def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('tensorflow', 'keras', 'tf_keras',
                                  'tensorflow_probability'):
          raise ImportError('blocked for the test: ' + name)
        return None

    sys.meta_path.insert(0, _Blocker())
""")


def _run(code):
  return subprocess.run([sys.executable, "-c", BLOCK_TF + code],
                        capture_output=True, text=True, check=False)


def test_import_tf_dp_does_not_import_tensorflow():
  out = _run("import tf_dp, sys; print('tensorflow' in sys.modules)")
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "False"


def test_analysis_works_without_tensorflow():
  out = _run(textwrap.dedent("""
      from tf_dp.analysis import compute_dp_sgd_privacy
      pld, _ = compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5)
      rdp, _ = compute_dp_sgd_privacy(60000, 256, 1.1, 60, 1e-5,
                                      accountant="rdp")
      print(round(pld, 2), round(rdp, 2))
  """))
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "2.38 2.6"


def test_unknown_attribute_is_an_attribute_error():
  out = _run("import tf_dp\ntry:\n  tf_dp.nope\nexcept AttributeError as e:"
             "\n  print('ok', e)")
  assert out.stdout.startswith("ok"), out.stderr


def test_no_module_shadows_a_function_of_tf_dp_analysis():
  # Importing every module of tf_dp.analysis and tf_dp.cli (as a command
  # line or another import would) leaves each public function a function.
  out = _run(textwrap.dedent("""
      import importlib, json, pkgutil
      import tf_dp.analysis as analysis, tf_dp.cli as cli
      before = {k: v for k, v in vars(analysis).items()
                if callable(v) and not k.startswith('_')}
      for package in (analysis, cli):
        for info in pkgutil.iter_modules(package.__path__):
          importlib.import_module(package.__name__ + '.' + info.name)
      print(json.dumps({
          'functions': len(before),
          'shadowed': sorted(k for k, v in before.items()
                             if vars(analysis)[k] is not v),
          'eps': analysis.compute_dp_sgd_privacy(60000, 256, 1.1, 60,
                                                 1e-5)[0],
          'z': analysis.compute_noise_multiplier(60000, 256, 3.0, 60,
                                                 1e-5)}))
  """))
  assert out.returncode == 0, out.stderr
  result = json.loads(out.stdout)
  assert result["shadowed"] == [] and result["functions"] > 20
  assert round(result["eps"], 2) == 2.38
  # test_calibration checks the search; this, that it still runs (the
  # search's relative tolerance is 1e-3).
  assert result["z"] == pytest.approx(0.96875, rel=1e-3)
