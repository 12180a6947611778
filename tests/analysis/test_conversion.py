"""Tests of the RDP -> (epsilon, delta) conversions and published anchors."""

import math
import warnings

import numpy as np
import pytest

from tf_dp.analysis import DEFAULT_ORDERS
from tf_dp.analysis import compute_rdp
from tf_dp.analysis import get_privacy_spent

dp_accounting = pytest.importorskip("dp_accounting")


def _eps(q, sigma, steps, delta, conversion):
  rdp = compute_rdp(q, sigma, steps, DEFAULT_ORDERS)
  return get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=delta,
                           conversion=conversion)[0]


def test_abadi_example_classic_conversion():
  # Abadi et al. 2016, Sec. 3.1: q=0.01, sigma=4, T=10^4, delta=1e-5 -> 1.26.
  assert _eps(0.01, 4.0, 10000, 1e-5, "classic") == pytest.approx(1.26,
                                                                   abs=0.005)


def test_abadi_example_tight_conversion():
  assert _eps(0.01, 4.0, 10000, 1e-5, "tight") == pytest.approx(1.04,
                                                                 abs=0.01)


def test_tf_privacy_readme_mnist_classic():
  # n=60000, batch 256, sigma=1.12, 60 epochs, delta=1e-5 -> eps=2.92.
  steps = math.ceil(60 * 60000 / 256)
  assert _eps(256 / 60000, 1.12, steps, 1e-5, "classic") == pytest.approx(
      2.92, abs=0.005)


# TF Privacy's tutorials/README MNIST table (batch 256 of 60000, delta 1e-5):
# (noise, epochs, published eps, the eps its current library gives).
TF_PRIVACY_TABLE = [(1.3, 15, 1.19, 0.955), (1.1, 60, 3.01, 2.597),
                    (0.7, 45, 7.10, 6.373)]


@pytest.mark.parametrize("sigma,epochs,published,library", TF_PRIVACY_TABLE)
def test_tf_privacy_table_labels_are_the_classic_conversion(
    sigma, epochs, published, library):
  """docs/benchmarks.md: the published labels are the classic conversion (at
  TF Privacy's coarser orders then, hence 0.03), today's are the tight one."""
  steps = math.ceil(epochs * 60000 / 256)
  q = 256 / 60000
  assert _eps(q, sigma, steps, 1e-5, "classic") == pytest.approx(published,
                                                                 abs=0.03)
  assert _eps(q, sigma, steps, 1e-5, "tight") == pytest.approx(library,
                                                               abs=5e-4)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.1, 1000), (0.1, 0.8, 50),
                                           (0.004, 2.0, 20000)])
def test_matches_dp_accounting_on_integer_orders(q, sigma, steps):
  orders = [float(o) for o in range(2, 128)]
  rdp = compute_rdp(q, sigma, steps, orders)
  eps = get_privacy_spent(orders, rdp, target_delta=1e-5)[0]
  acc = dp_accounting.rdp.RdpAccountant(orders)
  acc.compose(dp_accounting.PoissonSampledDpEvent(
      q, dp_accounting.GaussianDpEvent(sigma)), steps)
  assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-8)


def test_tight_never_worse_than_classic_and_never_negative():
  rdp = compute_rdp(0.02, 1.0, 500, DEFAULT_ORDERS)
  for delta in [1e-3, 1e-5, 1e-9]:
    tight = get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=delta)[0]
    classic = get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=delta,
                                conversion="classic")[0]
    assert 0 <= tight <= classic
  assert get_privacy_spent([2.0, 3.0], [0.0, 0.0], target_delta=0.5)[0] == 0


@pytest.mark.parametrize("conversion", ["tight", "classic"])
def test_epsilon_delta_round_trip(conversion):
  rdp = compute_rdp(0.01, 1.1, 3000, DEFAULT_ORDERS)
  eps, _, order = get_privacy_spent(DEFAULT_ORDERS, rdp, target_delta=1e-6,
                                    conversion=conversion)
  _, delta, _ = get_privacy_spent(DEFAULT_ORDERS, rdp, target_eps=eps,
                                  conversion=conversion)
  assert delta == pytest.approx(1e-6, rel=1e-6)
  _, delta_hand, _ = get_privacy_spent([order], [rdp[list(
      DEFAULT_ORDERS).index(order)]], target_eps=eps, conversion=conversion)
  assert delta_hand == pytest.approx(1e-6, rel=1e-6)


def test_classic_closed_form_single_order():
  eps, _, order = get_privacy_spent([3.0], [0.5], target_delta=1e-4,
                                    conversion="classic")
  assert eps == pytest.approx(0.5 + math.log(1e4) / 2) and order == 3.0
  eps_t, _, _ = get_privacy_spent([3.0], [0.5], target_delta=1e-4)
  assert eps_t == pytest.approx(0.5 + math.log(2 / 3) - (math.log(1e-4)
                                                         + math.log(3)) / 2)


def test_warns_when_optimum_at_edge_of_orders():
  orders = [2.0, 3.0, 4.0]
  rdp = compute_rdp(0.01, 2.0, 10, orders)  # optimum wants a large order.
  with pytest.warns(RuntimeWarning, match="largest order"):
    get_privacy_spent(orders, rdp, target_delta=1e-5)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    get_privacy_spent(DEFAULT_ORDERS, compute_rdp(0.01, 1.1, 1000),
                      target_delta=1e-5)


def test_infinite_rdp_gives_infinite_epsilon():
  eps, _, _ = get_privacy_spent([2.0, math.inf], [math.inf, math.inf],
                                target_delta=1e-5)
  assert eps == math.inf


@pytest.mark.parametrize("kwargs,match", [
    (dict(target_delta=None, target_eps=None), "exactly one"),
    (dict(target_delta=1e-5, target_eps=1.0), "exactly one"),
    (dict(target_delta=0.0), "target_delta"),
    (dict(target_delta=1.5), "target_delta"),
    (dict(target_eps=-1.0), "target_eps"),
    (dict(target_delta=1e-5, conversion="loose"), "conversion"),
])
def test_invalid_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    get_privacy_spent([2.0, 4.0], [0.1, 0.2], **kwargs)


def test_rdp_length_mismatch():
  with pytest.raises(ValueError, match="one value per order"):
    get_privacy_spent([2.0, 4.0], [0.1], target_delta=1e-5)
