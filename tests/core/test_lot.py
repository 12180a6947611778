"""Releasing one lot (tf_dp.core.lot): noise once, one ledger sample, the
denominator, the gradient query and the ledger a configuration implies."""

import numpy as np
import pytest
import tensorflow as tf

from tf_dp import dp_query
from tf_dp import privacy_ledger
from tf_dp.core import config as config_lib
from tf_dp.core import lot


def _config(**kwargs):
  kwargs.setdefault("population_size", 200)
  kwargs.setdefault("sampling", "fixed_size")
  return config_lib.DPConfig(l2_norm_clip=1.0, noise_multiplier=1.0,
                             **kwargs)


def _ledger_row(ledger):
  # pylint: disable-next=protected-access
  return ledger._samples.numpy()[int(ledger.sample_count) - 1]


def test_release_noises_once_records_once_and_advances_the_state():
  query = dp_query.GaussianSumQuery(1.0, 2.0, noise_seed=3)
  cfg = _config()
  ledger = lot.new_ledger(cfg)
  global_state = lot.global_state_variables(query)
  lot_sum = [tf.constant([1.0, 2.0]), tf.constant([[3.0]])]
  result, denominator, updates = lot.release(
      query, lot_sum, global_state, ledger, cfg, tf.constant(4.0),
      tf.constant(4.0))
  mean = lot.mean(result, denominator, updates)
  expected, new_state, _ = query.get_noised_result(
      lot_sum, query.initial_global_state())
  for m, e in zip(mean, expected):
    np.testing.assert_array_equal(m.numpy(), e.numpy() / 4.0)
  assert int(ledger.sample_count) == 1
  for variable, value in zip(tf.nest.flatten(global_state),
                             tf.nest.flatten(new_state)):
    np.testing.assert_array_equal(variable.numpy(), value.numpy())
  # Released again from the advanced state: new noise, not the same draw.
  again, _, _ = lot.release(query, lot_sum, global_state, ledger, cfg,
                            tf.constant(4.0), tf.constant(4.0))
  assert not np.allclose(again[0].numpy(), result[0].numpy())
  assert int(ledger.sample_count) == 2


@pytest.mark.parametrize("sampling", ["fixed_size", "shuffled"])
def test_fixed_size_denominator_is_the_records_and_q_what_was_drawn(sampling):
  cfg = _config(sampling=sampling, num_microbatches=3)
  ledger = lot.new_ledger(cfg)
  query = dp_query.GaussianSumQuery(1.0, 0.0)
  _, denominator, _ = lot.release(
      query, [tf.ones([2])], lot.global_state_variables(query), ledger, cfg,
      tf.constant(3.0), tf.constant(12.0))
  assert float(denominator) == 3.0
  n, q, _, examples_per_record = _ledger_row(ledger)
  assert (n, q, examples_per_record) == (200, pytest.approx(12 / 200), 4)


def test_poisson_denominator_is_q_times_n_and_q_the_samplers():
  cfg = _config(sampling="poisson", sampling_probability=0.05)
  ledger = lot.new_ledger(cfg)
  query = dp_query.GaussianSumQuery(1.0, 0.0)
  _, denominator, _ = lot.release(
      query, [tf.ones([2])], lot.global_state_variables(query), ledger, cfg,
      tf.constant(7.0), tf.constant(7.0))
  assert float(denominator) == pytest.approx(0.05 * 200)
  n, q, _, examples_per_record = _ledger_row(ledger)
  assert (n, q, examples_per_record) == (200, pytest.approx(0.05), 1)


def test_the_lot_is_recorded_as_configured_not_as_the_ledger_defaults():
  # A ledger shared with another mechanism (built with q = 0.01 and two
  # examples per record) records this step's Poisson lots at the step's q
  # and one example per record, whatever its stored defaults say.
  ledger = privacy_ledger.PrivacyLedger(200, 0.01, sampling="poisson",
                                        examples_per_record=2)
  cfg = _config(sampling="shuffled", ledger=ledger, population_size=None,
                sampling_probability=0.5)
  assert cfg.sampling == "poisson" and cfg.sampling_probability == 0.5
  query = dp_query.GaussianSumQuery(1.0, 1.0)
  for _ in range(2):
    lot.release(query, [tf.ones([2])], lot.global_state_variables(query),
                ledger, cfg, tf.constant(90.0), tf.constant(90.0))
  rows = ledger._samples.numpy()[:2]  # pylint: disable=protected-access
  np.testing.assert_allclose(rows[:, 1], [0.5, 0.5])  # q
  np.testing.assert_allclose(rows[:, 3], [1.0, 1.0])  # examples per record
  event = lot.sampling_event(cfg, ledger, tf.constant(7.0), tf.constant(7.0))
  assert float(event.sampling_probability) == 0.5  # the size drawn: private


def test_a_config_that_contradicts_its_ledger_is_refused():
  ledger = privacy_ledger.PrivacyLedger(200, 0.01, sampling="poisson")
  with pytest.raises(ValueError, match="population_size=300.*n = 200"):
    _config(sampling="shuffled", ledger=ledger, population_size=300)
  with pytest.raises(ValueError, match="sampling='fixed_size'.*'poisson'"):
    _config(sampling="fixed_size", ledger=ledger, population_size=None)
  cfg = _config(sampling="shuffled", ledger=ledger, population_size=None)
  assert (cfg.sampling, cfg.sampling_probability) == ("poisson", 0.01)
  own = privacy_ledger.PrivacyLedger(100, 0.1)
  with pytest.raises(ValueError, match="population_size=200.*n = 100"):
    lot.gradient_query(config_lib.DPConfig(
        None, None, population_size=200,
        dp_query=privacy_ledger.QueryWithLedger(
            dp_query.GaussianSumQuery(1.0, 1.0), own)), [tf.zeros([2])])


def test_new_ledger_follows_the_config():
  ledger = lot.new_ledger(_config(sampling="poisson",
                                  sampling_probability=0.1, max_lots=7),
                          name="my_ledger")
  assert ledger.sampling == "poisson"
  assert ledger.max_samples == 7
  assert float(ledger.population_size.numpy()) == 200
  assert ledger.name == "my_ledger"


def test_gradient_query_is_built_from_the_config_or_taken_as_given():
  templates = [tf.zeros([3]), tf.zeros([2, 2])]
  built, ledger = lot.gradient_query(_config(clipping="per_layer"),
                                     templates)
  assert ledger is None
  recorder = privacy_ledger.PrivacyLedger(200, 0.1)
  _, _, event = built.get_noised_result(
      built.initial_sample_state(templates), built.initial_global_state())
  recorder.record_sample(event)
  groups = recorder.to_dict()["samples"][0]["sum_queries"]
  clips = [g["l2_norm_clip"] for g in groups]
  stddevs = [g["noise_stddev"] for g in groups]
  assert len(groups) == 2  # one group per variable
  # Eq. (1) of McMahan & Andrew: z = (sum_g (sigma_g / C_g)^-2)^(-1/2).
  effective = sum((c / s) ** 2 for c, s in zip(clips, stddevs)) ** -0.5
  assert effective == pytest.approx(1.0)
  given = dp_query.GaussianSumQuery(2.0, 1.0)
  own = privacy_ledger.PrivacyLedger(200, 0.1)
  query, ledger = lot.gradient_query(
      config_lib.DPConfig(None, None, population_size=200,
                          dp_query=privacy_ledger.QueryWithLedger(given, own)),
      templates)
  assert query is given and ledger is own


def test_steps_are_ordered_for_memory_from_the_weight_count():
  # 2**22 weights (16 MiB of float32) and more; a shape unknown until run
  # time counts as large; Keras variables (tuple shapes) are counted too.
  threshold = lot.ORDERED_FOR_MEMORY_WEIGHTS
  assert threshold == 2 ** 22
  assert not lot.ordered_for_memory([tf.zeros([threshold - 1])])
  assert lot.ordered_for_memory([tf.zeros([threshold // 2])] * 2)
  assert not lot.ordered_for_memory([])
  unknown = tf.TensorSpec([None, 4])
  assert lot.ordered_for_memory([unknown])
  assert lot.ordered_for_memory([tf.Variable(tf.zeros([2048, 2048]))])
