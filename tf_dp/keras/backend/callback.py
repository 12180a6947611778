"""The Keras callback interface, duck-typed for both flavours.

tf_dp's callbacks (``PrivacyBudget``, the lot-boundary guard) are one class
each, used with Keras 3 and Keras 2 alike, so they cannot subclass either
flavour's ``Callback``. They subclass ``Callback`` here: the public
interface, plus each flavour's private hooks (``CallbackHooks`` of the
adapters).
"""

from typing import Any, Callable, Dict

from tf_dp.keras.backend import keras2
from tf_dp.keras.backend import keras3


class Callback(keras3.CallbackHooks, keras2.CallbackHooks):
  """A Keras callback for either flavour; ``on_*`` methods default to no-ops.

  Set ``train_batch_hooks`` (an attribute or a property) to True where
  ``on_train_batch_*`` acts: Keras 2 skips the per-batch hooks of callbacks
  that do not.
  """

  train_batch_hooks = False

  def __init__(self) -> None:
    self.model: Any = None
    self.params: Dict[str, Any] = {}
    self.validation_data: Any = None

  def set_model(self, model: Any) -> None:
    self.model = model

  def set_params(self, params: Dict[str, Any]) -> None:
    self.params = params

  def __getattr__(self, name: str) -> Callable[..., None]:
    if name.startswith("on_"):
      return lambda *args, **kwargs: None
    raise AttributeError(name)
