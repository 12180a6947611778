"""What a save wrote, read back from the files themselves, and whether it
holds a secret (tests/privacy/test_what_is_written.py).

Two readings of everything under a path: the arrays it stores (TF
checkpoint bundles, SavedModel variables included, through
``tf.train.load_checkpoint``; HDF5 datasets through h5py; ``.npz``; zip
archives such as ``.keras`` files, member by member) and its raw bytes (zip
members decompressed), which also reach what no reader parses, such as a
constant captured in a SavedModel's graph.
"""

import io
import os
import zipfile

import h5py
import numpy as np
import tensorflow as tf


def _files(path):
  if os.path.isfile(path):
    return [path]
  return sorted(os.path.join(root, name)
                for root, _, names in os.walk(path) for name in names)


def _zip_members(data):
  """``{name: bytes}`` of a zip archive's members, or None for non-zip."""
  if not zipfile.is_zipfile(io.BytesIO(data)):
    return None
  with zipfile.ZipFile(io.BytesIO(data)) as archive:
    return {name: archive.read(name) for name in archive.namelist()}


def _h5_arrays(source):
  out = []
  with h5py.File(source, "r") as f:
    f.visititems(lambda _, item: out.append(np.asarray(item[()])) if (
        isinstance(item, h5py.Dataset)) else None)
  return out


def _bundle_arrays(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return [np.asarray(reader.get_tensor(key))
          for key in reader.get_variable_to_shape_map()
          if key != "_CHECKPOINTABLE_OBJECT_GRAPH"]


def _arrays_of(name, data, path):
  """The arrays in one file (none if it is not one the readers know, or is
  cut short: a refused save may leave a partial file)."""
  try:
    return _parsed_arrays(name, data, path)
  except (OSError, ValueError, tf.errors.OpError, zipfile.BadZipFile):
    return []


def _parsed_arrays(name, data, path):
  members = _zip_members(data)
  if members is not None and not name.endswith(".npz"):
    return [a for member, blob in members.items()
            for a in _arrays_of(member, blob, None)]
  if data[:8] == b"\x89HDF\r\n\x1a\n":
    return _h5_arrays(io.BytesIO(data))
  if name.endswith(".npz"):
    with np.load(io.BytesIO(data)) as archive:
      return [archive[key] for key in archive.files]
  if name.endswith(".index") and path is not None:
    return _bundle_arrays(path[:-len(".index")])
  return []


def _bytes_of(data):
  members = _zip_members(data)
  if members is None:
    return [data]
  return [data] + [b for blob in members.values() for b in _bytes_of(blob)]


class Written:
  """Everything written under ``path`` (a file or a directory)."""

  def __init__(self, path):
    self.path = path
    self.arrays = []
    self.blobs = []
    for name in _files(path):
      with open(name, "rb") as f:
        data = f.read()
      self.arrays += [a for a in _arrays_of(name, data, name)
                      if a.dtype.kind in "fiu"]
      self.blobs += _bytes_of(data)

  def holds_values(self, values):
    """Whether one stored array holds all of ``values`` (compared at
    float32, the precision of every secret array here)."""
    wanted = np.asarray(values, np.float32).ravel()
    return any(np.isin(wanted, np.asarray(a, np.float32).ravel()).all()
               for a in self.arrays if a.size)

  def holds_bytes(self, pattern):
    return any(pattern in blob for blob in self.blobs)


def telltale_values(array, count=4):
  """Up to ``count`` values of ``array`` that are not whole numbers, spread
  over it: a stored array holding all of them holds ``array`` (sums of
  random floats). None if it has none (counts: found by no value)."""
  flat = np.asarray(array, np.float32).ravel()
  fractional = flat[flat != np.round(flat)]
  if not fractional.size:
    return None
  picks = np.linspace(0, fractional.size - 1, min(count, fractional.size))
  return fractional[picks.astype(int)]


def leaks(written, secrets):
  """The names of the ``secrets`` found in ``written``.

  ``secrets`` is ``{name: (kind, value)}``: ``"array"`` (a float array,
  found by its telltale values as stored arrays or as float32 bytes),
  ``"scalar"`` (a float found as a stored array's element) or ``"bytes"``
  (found anywhere in the raw bytes).
  """
  found = []
  for name, (kind, value) in secrets.items():
    if kind == "bytes":
      hit = written.holds_bytes(value)
    elif kind == "scalar":
      hit = written.holds_values([value])
    else:
      telltale = telltale_values(value)
      run = _fractional_run(value)
      hit = (telltale is not None and written.holds_values(telltale)) or (
          run is not None and written.holds_bytes(run.tobytes()))
    if hit:
      found.append(name)
  return found


def _fractional_run(array, length=3):
  """The first ``length`` consecutive float32 values that are not whole
  numbers, or None."""
  flat = np.asarray(array, np.float32).ravel()
  for i in range(flat.size - length + 1):
    if np.all(flat[i:i + length] != np.round(flat[i:i + length])):
      return flat[i:i + length]
  return None
