"""Tests of tf_dp.dp_query.nest_utils: partial flattening of nests.

Reference: when ``shallow`` has the full structure of ``deep`` the result is
``tf.nest.flatten(deep)``; otherwise the sub-structures are listed by hand.
"""

import pytest
import tensorflow as tf

from tf_dp.dp_query import nest_utils


def test_full_structure_flattens_like_tf_nest():
  deep = {"b": [1, (2, 3)], "a": 4, "c": {"y": 5, "x": 6}}
  assert nest_utils.flatten_up_to(deep, deep) == tf.nest.flatten(deep)


def test_leaves_of_shallow_keep_whole_sub_structures_in_sorted_key_order():
  shallow = {"w": None, "b": None}
  deep = {"w": [1, 2], "b": {"k": 3}}
  assert nest_utils.flatten_up_to(shallow, deep) == [{"k": 3}, [1, 2]]
  assert nest_utils.flatten_up_to([None, [None, None]],
                                  [(1, 2), [3, {"z": 4}]]) == [
                                      (1, 2), 3, {"z": 4}]


def test_a_leaf_shallow_takes_the_whole_deep():
  assert nest_utils.flatten_up_to(None, {"a": [1]}) == [{"a": [1]}]


@pytest.mark.parametrize("shallow,deep,message", [
    ({"a": 0, "b": 0}, {"a": 1, "c": 2},
     r"record: expected keys \['a', 'b'\]; got \['a', 'c'\]"),
    ({"a": 0}, [1], r"record: expected keys \['a'\]; got list"),
    ([0, 0], [1, 2, 3], r"record: expected 2 entries"),
    ({"a": [0, 0]}, {"a": 5}, r"record\['a'\]: expected a structure like "
                              r"list with 2 entries; got 5"),
    ([0, {"k": 0}], [1, {"j": 2}], r"record\[1\]: expected keys \['k'\]"),
])
def test_mismatches_name_the_path(shallow, deep, message):
  with pytest.raises(ValueError, match=message):
    nest_utils.flatten_up_to(shallow, deep)


def test_map_structure_up_to_applies_fn_to_matching_sub_structures():
  shallow = {"x": None, "y": [None, None]}
  left = {"x": [1, 2], "y": [3, 4]}
  right = {"x": [10, 20], "y": [30, 40]}
  out = nest_utils.map_structure_up_to(
      shallow, lambda s, a, b: (len(s) if isinstance(s, list) else s, a, b),
      left, left, right)
  assert out == {"x": (2, [1, 2], [10, 20]), "y": [(3, 3, 30), (4, 4, 40)]}
