"""Tests of ``strategy_workers``: the hosts a strategy spans."""

import types

import tensorflow as tf

from tf_dp.dp_query import strategy_context


def _with_cluster(jobs):
  spec = tf.train.ClusterSpec(jobs)
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec)
  return types.SimpleNamespace(cluster_resolver=resolver)


def test_strategies_without_a_cluster_span_one_host():
  assert strategy_context.strategy_workers(tf.distribute.get_strategy()) == 1
  assert strategy_context.strategy_workers(
      tf.distribute.MirroredStrategy(["/cpu:0"])) == 1
  assert strategy_context.strategy_workers(None) == 1


def test_the_chief_and_workers_count_other_jobs_do_not():
  assert strategy_context.strategy_workers(_with_cluster({
      "chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]})) == 3
  assert strategy_context.strategy_workers(_with_cluster({
      "worker": ["h:1"]})) == 1
