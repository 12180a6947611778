"""The first batch of ``fit``'s input (``tf_dp.keras.first_batch``): read
without consuming the input, it feeds the privacy self-check, which refuses
a layer that mixes examples before any step whatever ``fit`` is given."""

import numpy as np
import pytest
import tensorflow as tf

import tf_dp
from tests.keras import helpers
from tf_dp.keras import backend
from tf_dp.keras import first_batch
from tf_dp.keras import per_example

KERAS = helpers.keras_modules()
N, BATCH = 40, 10


def _batch_centring_model(K, **dp_kwargs):
  """A model with a layer that subtracts the batch mean: one example's
  gradient depends on the others (the self-check must refuse it)."""

  class BatchCentre(K.layers.Layer):

    def call(self, inputs):
      return inputs - tf.reduce_mean(inputs, axis=0, keepdims=True)

  model = helpers.build_model(K, "dense")
  model = K.Sequential([K.layers.Input((6,)), BatchCentre()] +
                       list(model.layers))
  model = tf_dp.keras.make_private(model)
  model.compile(optimizer=tf_dp.DPOptimizer(
      K.optimizers.SGD(0.1), 1.0, 1.0, population_size=N, **dp_kwargs),
                loss=K.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _every_fit_input(K, x, y):
  """Every kind of input fit accepts (name, fit kwargs)."""

  def generator():
    while True:
      for i in range(0, N, BATCH):
        yield x[i:i + BATCH], y[i:i + BATCH]

  base = getattr(K.utils, "PyDataset", None) or K.utils.Sequence

  class Batches(base):

    def __len__(self):
      return N // BATCH

    def __getitem__(self, i):
      return x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH]

  return {
      "arrays": dict(x=x, y=y, batch_size=BATCH),
      "dataset": dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(
          BATCH)),
      "generator": dict(x=generator(), steps_per_epoch=N // BATCH),
      base.__name__: dict(x=Batches()),
  }


def _assert_refused_before_any_step(model, **fit_kwargs):
  """fit raises PrivacyCheckError and leaves the weights and the ledger as
  they were."""
  before = helpers.weights(model)
  with pytest.raises(tf_dp.keras.privacy_check.PrivacyCheckError):
    model.fit(epochs=1, verbose=0, **fit_kwargs)
  for a, b in zip(before, helpers.weights(model)):
    np.testing.assert_array_equal(a, b)
  assert helpers.ledger_samples(model) == []


@pytest.mark.parametrize("K", KERAS)
@pytest.mark.parametrize("given",
                         ["arrays", "dataset", "generator", "batches"])
def test_the_self_check_runs_on_every_input_kind(K, given):
  """A layer that mixes examples is refused before any step whatever fit
  is given (it trained unseen on a generator and a PyDataset, with one
  example moving the update by 4.5 x 2C)."""
  x, y = helpers.make_data("dense", N)
  model = _batch_centring_model(K)
  inputs = _every_fit_input(K, x, y)
  kwargs = inputs[given] if given in inputs else list(inputs.values())[-1]
  _assert_refused_before_any_step(model, **kwargs)


@pytest.mark.parametrize("K", KERAS)
def test_a_generator_trains_on_every_batch_after_the_self_check(K):
  """The self-check reads the generator's first batch and gives it back:
  fit trains on all of them (one lot per batch, q = BATCH / N)."""
  x, y = helpers.make_data("dense", N)
  model = helpers.compile_dp(K, helpers.build_model(K, "dense"), N,
                             learning_rate=0.5)

  def generator():
    for i in range(0, N, BATCH):
      yield x[i:i + BATCH], y[i:i + BATCH]

  model.fit(generator(), epochs=1, verbose=0)
  assert [s["sampling_probability"] for s in helpers.ledger_samples(model)] == [
      pytest.approx(BATCH / N)] * (N // BATCH)


def test_an_input_the_self_check_cannot_read_is_refused():
  """Any other input (here an iterable that is not an iterator) is
  refused with the reason while the self-check is on."""
  model = _batch_centring_model(KERAS[0].values[0])

  class Opaque:

    def __iter__(self):
      return iter(())

  with pytest.raises(ValueError, match="could not read the first batch"):
    model.fit(Opaque(), epochs=1, verbose=0)


@pytest.mark.parametrize("K", KERAS)
def test_padding_rows_do_not_hide_a_mixing_layer(K):
  """A Poisson dataset whose first lot drew no example: its rows are all
  padding, copies of one example with weight 0, so the check's neighbour
  (one row replaced by another) equals the batch. Checked on them the
  batch-centring layer passed and trained; the check reads examples of
  positive weight from the next lots and refuses it."""
  x, y = helpers.make_data("dense", N)
  index = np.concatenate([np.zeros(BATCH, np.int64),
                          np.arange(BATCH, 3 * BATCH)])
  weight = np.concatenate([np.zeros(BATCH),
                           np.ones(2 * BATCH)]).astype("float32")
  lots = tf.data.Dataset.from_tensor_slices(
      (x[index], y[index], weight)).batch(BATCH)
  lots = tf_dp.data.declare_sampling(lots, "poisson", BATCH / N)
  model = _batch_centring_model(K, sampling="poisson",
                                sampling_probability=BATCH / N)
  _assert_refused_before_any_step(model, x=lots)


@pytest.mark.parametrize("K", KERAS)
def test_lots_that_drew_nobody_do_not_skip_the_self_check(K):
  """A sampler draws fresh lots on every iteration: that the lots the
  self-check reads are empty says nothing about those fit trains on. With
  seed 70, the 2 lots of q = 0.01 over 40 examples drew nobody on the
  first iteration and 2 examples each on the second (fit's): checked on
  the empty ones the batch-centring layer trained; the check reads lots
  until it holds examples and refuses it."""
  x, y = helpers.make_data("dense", N)
  lots = tf_dp.data.poisson_sampled_batches(x, y, 0.01, 2, seed=70)
  model = _batch_centring_model(K, sampling="poisson",
                                sampling_probability=0.01)
  with pytest.warns(UserWarning, match="seed=70"):
    _assert_refused_before_any_step(model, x=lots)


# What ``_weighted_rows_of_dataset`` reads from a dataset, and when it stops.


def _read(dataset, **kwargs):
  return first_batch._weighted_rows_of_dataset(  # pylint: disable=protected-access
      backend.default(), dataset, **kwargs)


def _weighted_batches(x, y, weight, rows_per_batch, counter=None):
  """``(x, y, weight)`` batches of ``rows_per_batch`` rows; ``counter``
  (a list) gets one entry per batch read, across re-iterations."""
  dataset = tf.data.Dataset.from_tensor_slices(
      (x, y, np.asarray(weight, "float32"))).batch(rows_per_batch)
  if counter is None:
    return dataset

  def count(*batch):
    tf.py_function(lambda: counter.append(1), [], [])
    return batch

  # Counts what the caller reads: no prefetch injected ahead of it (tf.data
  # reads ahead by a timing-dependent amount otherwise).
  options = tf.data.Options()
  options.experimental_optimization.inject_prefetch = False
  options.autotune.enabled = False
  return dataset.map(count).with_options(options)


def _padded_lots(x, y, lots, rows_per_lot):
  """Lots of the examples listed in ``lots`` (indices into x), each padded
  to ``rows_per_lot`` rows of zeros of weight 0, as the samplers pad."""
  xs, ys, ws = [], [], []
  for lot in lots:
    pad = rows_per_lot - len(lot)
    xs += [x[lot], np.zeros((pad,) + x.shape[1:], x.dtype)]
    ys += [y[lot], np.zeros((pad,), y.dtype)]
    ws += [np.ones(len(lot)), np.zeros(pad)]
  return np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)


def test_an_empty_dataset_gives_no_rows():
  """Nothing to check, marked or not, weighted or not."""
  x, y = helpers.make_data("dense", N)
  unweighted = tf.data.Dataset.from_tensor_slices((x[:0], y[:0])).batch(4)
  weighted = _weighted_batches(x[:0], y[:0], np.zeros(0), 4)
  marked = tf_dp.data.declare_sampling(
      _weighted_batches(x[:0], y[:0], np.zeros(0), 4), "poisson", 0.1)
  for dataset in (unweighted, weighted, marked):
    assert _read(dataset, lots_for_evidence=3) is None


def test_an_unweighted_dataset_gives_its_first_batch():
  """Every row of a batch without weights is an example: the first batch
  as it is."""
  x, y = helpers.make_data("dense", N)
  got = _read(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))
  np.testing.assert_array_equal(got[0], x[:BATCH])
  np.testing.assert_array_equal(got[1], y[:BATCH])
  assert got[2] is None


def test_an_unmarked_dataset_gives_its_examples_of_positive_weight():
  """Rows of weight 0 are left out; batches are read until 8 examples
  (here the 4th batch of 4 rows, every other row weighted)."""
  x, y = helpers.make_data("dense", N)
  weight = np.tile([1.0, 0.0], N // 2)
  got = _read(_weighted_batches(x, y, weight, 4))
  np.testing.assert_array_equal(got[0], x[0:16:2])
  np.testing.assert_array_equal(got[1], y[0:16:2])
  np.testing.assert_array_equal(got[2], np.ones(8))


def test_an_unmarked_dataset_is_read_at_most_16_batches():
  """2 examples in the first 2 of 20 batches: read once, 16 batches, and
  those 2 are checked."""
  x, y = helpers.make_data("dense", N)
  weight = np.zeros(N)
  weight[[0, 2]] = 1.0
  read = []
  got = _read(_weighted_batches(x, y, weight, 2, read))
  np.testing.assert_array_equal(got[0], x[[0, 2]])
  assert len(read) == 16


def test_an_unmarked_dataset_with_no_example_of_positive_weight():
  """All weight 0: every gradient is 0 and nothing can be learned about
  anyone; the first batch is given back (its rows prove nothing, and need
  not). Over 16 batches, unread batches could hold examples: refused."""
  x, y = helpers.make_data("dense", N)
  got = _read(_weighted_batches(x, y, np.zeros(N), BATCH))
  np.testing.assert_array_equal(got[0], x[:BATCH])
  np.testing.assert_array_equal(got[2], np.zeros(BATCH))
  with pytest.raises(first_batch._NoBatch, match="first 16 batch"):  # pylint: disable=protected-access
    _read(_weighted_batches(x, y, np.zeros(N), 2))


def test_an_unmarked_dataset_with_one_example_among_padding_is_refused():
  """One example of positive weight in batches of several rows: the check
  has no second example to change, and the reader cannot tell whether fit
  mixes the padding with examples it did not read."""
  x, y = helpers.make_data("dense", N)
  weight = np.zeros(N)
  weight[3] = 1.0
  with pytest.raises(first_batch._NoBatch,  # pylint: disable=protected-access
                     match="first 4 batch.*fewer than 2"):
    _read(_weighted_batches(x, y, weight, BATCH))


def test_a_dataset_of_one_example_gives_it_alone():
  """Batches of one row cannot mix examples: the first batch (one row)
  is given back, and the self-check, which needs 2 examples, cannot run
  on it (it warns; fit trains: nothing else is in the batch)."""
  x, y = helpers.make_data("dense", N)
  got = _read(tf.data.Dataset.from_tensor_slices((x[:1], y[:1])).batch(4))
  np.testing.assert_array_equal(got[0], x[:1])
  got = _read(_weighted_batches(x[:1], y[:1], [1.0], 4))
  np.testing.assert_array_equal(got[0], x[:1])
  np.testing.assert_array_equal(got[2], [1.0])
  # Lots drawn from one example (q = 1: it is in every lot): the same
  # example in every lot is one example, not 4.
  lots = tf_dp.data.poisson_sampled_batches(x[:1], y[:1], 1.0, 4, seed=3)
  got = _read(lots, lots_for_evidence=100)
  np.testing.assert_array_equal(got[0], x[:1])


def test_a_marked_dataset_whose_first_lots_are_empty_reads_fresh_lots():
  """Seed 70, q = 0.01, 2 lots over 40 examples: the first iteration drew
  nobody; fresh lots are read until they hold examples, and those are
  examples of the dataset with their labels and weight 1."""
  x, y = helpers.make_data("dense", N)
  lots = tf_dp.data.poisson_sampled_batches(x, y, 0.01, 2, seed=70)
  first = [b[2].numpy().sum() for b in lots]
  assert first == [0.0, 0.0]  # What this test relies on.
  got = _read(lots, lots_for_evidence=100)
  assert int(per_example.batch_size(got[0])) >= 2
  np.testing.assert_array_equal(got[2], np.ones(len(got[2])))
  for row, label in zip(got[0].numpy(), got[1].numpy()):
    match = np.flatnonzero((x == row).all(1))
    assert len(match) == 1 and y[match[0]] == label
  assert len({r.tobytes() for r in got[0].numpy()}) >= 2


def test_a_marked_dataset_of_empty_lots_is_read_until_the_evidence():
  """Lots that all drew nobody: after ``lots_for_evidence`` batches of
  them, the dataset holds no example of positive weight (all empty by
  chance has probability below 1e-9) and the first lot is given back;
  without that number (n unknown) they are read up to ``most_batches``
  and refused."""
  x, y = helpers.make_data("dense", N)
  read = []
  lots = tf_dp.data.declare_sampling(
      _weighted_batches(x, y, np.zeros(N), BATCH, read), "poisson", 0.1)
  got = _read(lots, lots_for_evidence=9)
  np.testing.assert_array_equal(got[2], np.zeros(BATCH))
  assert len(read) == 9
  read.clear()
  with pytest.raises(first_batch._NoBatch, match="first 20 batch"):  # pylint: disable=protected-access
    _read(lots, most_batches=20)
  assert len(read) == 20


@pytest.mark.parametrize("K", KERAS)
def test_an_example_read_twice_does_not_hide_a_mixing_layer(K):
  """Lots of example 0, of example 0 again, then of examples 1 and 2
  (padded with zeros of weight 0). Checked on the 4 rows read, the check's
  neighbour (the first row replaced by the second) equals the batch: the
  batch-centring layer passed and trained on the lot of 1 and 2. A row
  whose inputs equal a row read before is no new example: the check runs
  on examples 0, 1 and 2 and refuses the layer before any step."""
  x, y = helpers.make_data("dense", N)
  lots = tf.data.Dataset.from_tensor_slices(
      _padded_lots(x, y, [[0], [0], [1, 2]], BATCH)).batch(BATCH)
  lots = tf_dp.data.declare_sampling(lots, "poisson", BATCH / N)
  model = _batch_centring_model(K, sampling="poisson",
                                sampling_probability=BATCH / N)
  _assert_refused_before_any_step(model, x=lots)


def test_a_padded_lot_of_one_example_drawn_again_and_again_is_refused():
  """Lots of one example among padding: however many lots are read, they
  hold one example, which the check cannot compare with another; refused
  (fit then asks for self_check=False or a check on a batch of the
  user's own)."""
  x, y = helpers.make_data("dense", N)
  lots = tf.data.Dataset.from_tensor_slices(
      _padded_lots(x, y, [[5]] * 3, 4)).batch(4)
  lots = tf_dp.data.declare_sampling(lots, "poisson", 0.5)
  with pytest.raises(first_batch._NoBatch,  # pylint: disable=protected-access
                     match="first 30 batch.*fewer than 2"):
    _read(lots, lots_for_evidence=3, most_batches=30)


@pytest.mark.parametrize("kind", ["dense", "nest", "ragged", "sparse"])
def test_rows_with_equal_inputs_are_one_example(kind):
  """Rows 0 and 2 have equal inputs, whatever their kind (dense, a dict
  of them, ragged, sparse): rows 0, 1 and 3 are read, in that order."""
  values = [[1.0, 2.0], [3.0], [1.0, 2.0], [1.0, 2.0, 0.5]]
  ragged = tf.ragged.constant(values)
  x = {"dense": ragged.to_tensor(),
       "nest": {"a": ragged.to_tensor(), "b": tf.constant([7, 8, 7, 9])},
       "ragged": ragged,
       "sparse": ragged.to_sparse()}[kind]
  dataset = tf.data.Dataset.from_tensor_slices(
      (x, tf.range(4), tf.ones([4]))).batch(2)
  got = _read(dataset)
  np.testing.assert_array_equal(got[1], [0, 1, 3])
  expected = tf.gather(ragged, [0, 1, 3])
  inputs = got[0]["a"] if kind == "nest" else got[0]
  if kind == "ragged":
    assert inputs.to_list() == expected.to_list()
  else:
    dense = (tf.sparse.to_dense(inputs) if kind == "sparse" else inputs)
    np.testing.assert_array_equal(dense, expected.to_tensor())
