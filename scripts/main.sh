#!/usr/bin/env bash
# The main job: sets up the default stack (TF 2.21 + Keras 3) and runs it.
# Extra arguments go to the job's script.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL=2
py="$(scripts/setup_env.sh tf221 | tail -n 1)"
if [ -f tutorials/mnist_dpsgd_keras.py ]; then
  exec "$py" tutorials/mnist_dpsgd_keras.py "$@"
fi
exec "$py" -m tf_dp.cli.compute_dp_sgd_privacy --n=60000 --batch_size=256 \
  --noise_multiplier=1.1 --epochs=60 --delta=1e-5 "$@"
