"""Tests of the ledger format (versions 1 and 2) and its validation."""

import json
import math

import numpy as np
import pytest

from tf_dp.analysis import ledger_schema as schema
from tf_dp.sampling import PrivacyUnit
from tf_dp.sampling import Sampling


def entry(q=0.01, queries=((1.0, 1.1),), sampling="poisson", n=60000,
          per_record=1, q_key="sampling_probability", **extra):
  return dict({"population_size": n, q_key: q,
               "sampling": sampling, "examples_per_record": per_record,
               "sum_queries": [{"l2_norm_clip": c, "noise_stddev": s}
                               for c, s in queries]}, **extra)


def v1(samples, dropped=0):
  return {"format": schema.FORMAT_V1, "dropped_samples": dropped,
          "samples": samples}


A, B = entry(0.01), entry(0.02, ((1.0, 2.0), (0.5, 1.0)))


def test_v1_is_read_as_runs_of_consecutive_identical_samples():
  runs, dropped = schema.decode(v1([A, A, B, A, dict(A)]))
  assert dropped == 0
  assert [r.count for r in runs] == [2, 1, 2]
  assert runs[0].sample == runs[2].sample != runs[1].sample
  assert runs[1].sample.sum_queries == ((1.0, 2.0), (0.5, 1.0))
  assert schema.total_samples(runs) == 5


def test_v2_round_trip_and_expansion_to_v1():
  runs, _ = schema.decode(v1([A, A, B, A]))
  data = json.loads(json.dumps(schema.encode(runs, 3)))
  assert data["format"] == schema.FORMAT_V2 == schema.CURRENT_FORMAT
  assert [r["count"] for r in data["runs"]] == [2, 1, 1]
  assert schema.decode(data) == (runs, 3)
  assert schema.encode(runs, 3, schema.FORMAT_V1) == v1([A, A, B, A], 3)


def test_every_kind_of_sample_round_trips_in_both_formats_and_buffers():
  # Each sampling kind and privacy unit, with 0, 1 and 2 sum queries
  # (including a clip of 0 and infinite noise: nothing released), runs of
  # 1-3 samples: written, read back equal, values typed as written.
  runs = [schema.Run(schema.Sample(1000 + i, 0.01 * (i + 1), kind, 1 + i % 2,
                                   queries, unit), 1 + i % 3)
          for i, (kind, unit, queries) in enumerate(
              (k, u, qs) for k in Sampling for u in PrivacyUnit
              for qs in ((), ((1.0, 1.1),), ((0.0, 2.0), (0.5, math.inf))))]
  assert len(runs) == 24
  for fmt in schema.READABLE_FORMATS:
    data = json.loads(json.dumps(schema.encode(runs, 2, fmt)))
    decoded, dropped = schema.decode(data)
    assert (decoded, dropped) == (runs, 2)
    for run in decoded:
      sample = run.sample
      assert type(sample.sampling) is Sampling
      assert type(sample.privacy_unit) is PrivacyUnit
      assert [type(v) for v in (sample.population_size,
                                sample.sampling_probability,
                                sample.examples_per_record, run.count)] == [
                                    int, float, int, int]
  rows, queries = schema.buffers_from_runs(runs)
  assert schema.runs_from_buffers(rows, queries, len(rows),
                                  len(queries)) == runs


def test_sampling_codes_are_stable_for_checkpoints():
  # Buffers and checkpoints store the index: appending only.
  kinds = ("poisson", "fixed_size", "shuffled", "fixed_order")
  assert [schema.sampling_code(k) for k in kinds] == [0, 1, 2, 3]
  assert [schema.sampling_kind(float(c)) for c in range(4)] == list(kinds)
  with pytest.raises(ValueError, match=r"sampling code.*got 4\.0"):
    schema.sampling_kind(4.0)


def test_million_step_run_is_one_run_of_a_few_hundred_bytes():
  # 10^6 steps of a two-query sample, as PrivacyLedger buffers hold them.
  n = 10 ** 6
  rows = np.tile([60000.0, 256 / 60000, 0.0, 1.0], (n, 1))
  queries = np.zeros((2 * n, 3))
  queries[:, 0] = np.repeat(np.arange(n), 2)
  queries[0::2, 1:] = [1.0, 1.1]
  queries[1::2, 1:] = [0.5, 3.0]
  runs = schema.runs_from_buffers(rows, queries, n, 2 * n)
  assert len(runs) == 1 and runs[0].count == n
  v2_bytes = len(json.dumps(schema.encode(runs, 0)))
  assert v2_bytes < 400  # measured: 315 bytes
  # Version 1 writes every sample: ~229 bytes each, 229 MB for 10^6.
  one_v1 = len(json.dumps(schema.encode([schema.Run(runs[0].sample, 1)], 0,
                                        schema.FORMAT_V1)["samples"][0]))
  assert 200 < one_v1 < 260
  sample_rows, query_rows = schema.buffers_from_runs(runs)
  np.testing.assert_array_equal(sample_rows, rows)
  np.testing.assert_array_equal(query_rows, queries)


def test_buffer_runs_match_a_per_sample_reading():
  # Random blocks of samples with 0-3 queries each, fixed seed; the
  # vectorised boundaries must agree with a naive one-by-one reading.
  rng = np.random.default_rng(0)
  templates = [schema.Sample(100, 0.1, "poisson", 1, ()),
               schema.Sample(100, 0.1, "poisson", 1, ((1.0, 2.0),)),
               schema.Sample(100, 0.1, "poisson", 1, ((1.0, 3.0),)),
               schema.Sample(100, 0.1, "poisson", 1, ((1.0, 2.0), (1.0, 2.0))),
               schema.Sample(100, 0.2, "shuffled", 4, ((1.0, 2.0),)),
               schema.Sample(50, 0.1, "fixed_size", 1,
                             ((1.0, 2.0), (0.5, 1.0), (2.0, 9.0)))]
  samples = [templates[rng.integers(len(templates))]
             for _ in range(60) for _ in range(rng.integers(1, 4))]
  expected = schema.merge_runs([schema.Run(s, 1) for s in samples])
  rows, queries = schema.buffers_from_runs(
      [schema.Run(s, 1) for s in samples])
  assert schema.runs_from_buffers(rows, queries, len(rows),
                                  len(queries)) == expected
  # Query rows of different samples interleaved (each sample's own queries
  # in order) give the same runs.
  sample_key = rng.random(len(rows))[queries[:, 0].astype(int)]
  perm = np.argsort(sample_key, kind="stable")
  assert np.any(np.diff(queries[perm, 0]) < 0)
  assert schema.runs_from_buffers(rows, queries[perm], len(rows),
                                  len(queries)) == expected
  assert len(expected) < len(samples)


@pytest.mark.parametrize("bad,match", [
    (entry(sampling="bogus"),
     r"samples\[1\]\.sampling must be one of \('poisson', 'fixed_size', "
     r"'shuffled', 'fixed_order'\); got 'bogus'"),
    (entry(n=0), r"samples\[1\]\.population_size must be an integer >= 1"),
    (entry(n=1.5), r"population_size.*got 1\.5"),
    (entry(n=True), r"population_size.*got True"),
    (entry(q=1.5), r"sampling_probability must be a probability in \[0, 1\]"),
    (entry(q=math.nan), r"sampling_probability.*got nan"),
    (entry(q="0.1"), r"sampling_probability.*got '0\.1'"),
    # A key this format does not have is refused, never guessed at.
    (entry(q_key="selection_probability"),
     r"missing \['sampling_probability'\], unknown "
     r"\['selection_probability'\]"),
    ({k: v for k, v in entry().items() if k != "examples_per_record"},
     r"missing \['examples_per_record'\]"),
    (entry(per_record=0), r"examples_per_record must be an integer >= 1"),
    (entry(queries=((1.0, -1.0),)),
     r"samples\[1\]\.sum_queries\[0\]\.noise_stddev.*got -1\.0"),
    (entry(queries=((math.nan, 1.0),)), r"sum_queries\[0\]\.l2_norm_clip"),
    (dict(entry(), sum_queries=[{"l2_norm_clip": 1.0}]),
     r"sum_queries\[0\] must have exactly the keys.*missing \['noise_stddev"),
    (dict(entry(), sum_queries="none"), r"sum_queries must be a list"),
    (entry(replacement=True), r"unknown \['replacement'\]"),
    ({k: v for k, v in entry().items() if k != "sampling"},
     r"missing \['sampling'\]"),
    ("sample", r"samples\[1\] must be a dict"),
])
def test_every_field_is_validated_with_its_path(bad, match):
  with pytest.raises(ValueError, match=match):
    schema.decode(v1([A, bad]))


@pytest.mark.parametrize("data,match", [
    ({"format": schema.FORMAT_V2, "dropped_samples": 0,
      "runs": [dict(A, count=0)]}, r"runs\[0\]\.count must be an integer >= 1"),
    ({"format": schema.FORMAT_V2, "dropped_samples": 0, "runs": [A]},
     r"runs\[0\] must have exactly the keys.*missing \['count'\]"),
    ({"format": schema.FORMAT_V2, "dropped_samples": 0,
      "runs": [dict(A, count=2.5)]}, r"count.*got 2\.5"),
    ({"format": schema.FORMAT_V2, "dropped_samples": 0, "samples": [A]},
     r"missing \['runs'\], unknown \['samples'\]"),
    (v1([A], dropped=-1), r"dropped_samples must be an integer >= 0"),
    ({"format": "tf_dp.privacy_ledger/3", "runs": []},
     r"newer tf_dp.*upgrade"),
    ({"format": "other", "samples": []}, r"Not a tf_dp ledger export"),
    ({"dropped_samples": 0, "samples": [A]}, r"Not a tf_dp ledger export"),
    ({"format": schema.FORMAT_V1, "samples": [A]},
     r"missing \['dropped_samples'\]"),
    ([A], r"must be a dict"),
    (v1({"0": A}), r"samples must be a list"),
])
def test_top_level_is_validated(data, match):
  with pytest.raises(ValueError, match=match):
    schema.decode(data)


def test_encode_refuses_unknown_format():
  with pytest.raises(ValueError, match="ledger_format must be one of"):
    schema.encode([], 0, "tf_dp.privacy_ledger/9")


def test_privacy_ledger_writes_version_2_and_reads_both():
  tf = pytest.importorskip("tensorflow")
  # pylint: disable=g-import-not-at-top
  from tf_dp.dp_query import events
  from tf_dp.privacy_ledger import PrivacyLedger
  ledger = PrivacyLedger(1000, 0.05, sampling="fixed_size", max_samples=10)
  for stddev in (2.0, 2.0, 2.0, 3.0):
    ledger.record_sample([events.SumQueryEvent(tf.constant(1.0),
                                               tf.constant(stddev))])
  text = ledger.to_json()
  data = json.loads(text)
  assert data["format"] == schema.FORMAT_V2
  assert [r["count"] for r in data["runs"]] == [3, 1]
  per_sample = ledger.to_dict()
  assert per_sample["format"] == schema.FORMAT_V1
  assert len(per_sample["samples"]) == 4
  for rebuilt in (PrivacyLedger.from_json(text),
                  PrivacyLedger.from_dict(per_sample),
                  PrivacyLedger.from_json(ledger.to_json(schema.FORMAT_V1))):
    assert rebuilt.to_dict() == per_sample
  short = PrivacyLedger.from_json(text, max_samples=2)
  assert short.to_dict()["dropped_samples"] == 2
  with pytest.raises(ValueError, match=r"runs\[0\]\.sampling.*'bogus'"):
    PrivacyLedger.from_json(text.replace("fixed_size", "bogus"))


def test_privacy_unit_codes_keep_per_example_codes_unchanged():
  # Codes 0-2 (every buffer written before the unit existed) are per
  # example; a user-level code adds UNIT_CODE_STRIDE.
  stride = schema.UNIT_CODE_STRIDE
  for i, kind in enumerate(("poisson", "fixed_size", "shuffled",
                            "fixed_order")):
    assert schema.sampling_code(kind, "example") == schema.sampling_code(
        kind) == i
    assert schema.sampling_code(kind, "user") == i + stride
    assert schema.sampling_kind(float(i + stride)) == kind
    assert schema.privacy_unit(float(i)) == "example"
    assert schema.privacy_unit(float(i + stride)) == "user"
  for bad in (4.0, stride + 4.0, 2 * stride + 0.0, -1.0, 0.5):
    with pytest.raises(ValueError, match="sampling code"):
      schema.privacy_unit(bad)


def test_an_entry_without_privacy_unit_reads_as_example():
  runs, _ = schema.decode(v1([A]))
  assert runs[0].sample.privacy_unit == "example"
  # ... and an example-level sample is written without the key: the
  # export of a per-example run is what it was before units existed.
  assert "privacy_unit" not in schema.encode(runs, 0)["runs"][0]


def test_a_user_level_entry_round_trips_in_json_and_buffers():
  user = entry(0.05, n=300, privacy_unit="user")
  runs, _ = schema.decode(v1([user, user, A]))
  assert [r.sample.privacy_unit for r in runs] == ["user", "example"]
  assert runs[0].sample.population_size == 300
  data = json.loads(json.dumps(schema.encode(runs, 0)))
  assert data["runs"][0]["privacy_unit"] == "user"
  assert schema.decode(data)[0] == runs
  rows, queries = schema.buffers_from_runs(runs)
  assert rows[0, 2] == schema.UNIT_CODE_STRIDE  # Poisson, per user.
  assert schema.runs_from_buffers(rows, queries, len(rows),
                                  len(queries)) == runs


def test_a_bad_privacy_unit_is_refused_by_path():
  with pytest.raises(ValueError, match=r"runs\[0\]\.privacy_unit must be one "
                     r"of \('example', 'user'\); got 'person'"):
    schema.decode({"format": schema.FORMAT_V2, "dropped_samples": 0,
                   "runs": [entry(privacy_unit="person", count=1)]})
