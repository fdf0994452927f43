#!/usr/bin/env bash
# Smoke test of `envkit train` with vLLM colocated in the training process (TRL 1.16, vLLM 0.31), on an NVIDIA
# GPU or on CPU with vLLM's CPU build.
#
# Needs: `pip install -e ".[gpu]"` (GPU) or the "vLLM on CPU" install of docs/vllm-cpu.md (CPU) done beforehand. Needs no
# network: the model is built here (`--model tiny`, saved to disk so vLLM can load it), the environment is
# served here.
#
#   scripts/gpu_smoke.sh [OUTPUT_DIR] [MAX_STEPS]
#
# It serves the echo environment on 127.0.0.1 in the background, trains a few GRPO steps against it
# with generation by colocated vLLM, and prints the run's figures (time per step, share of it spent
# in environment calls, reward at the start and end, episodes lost, GPU memory where there is a GPU).

set -euo pipefail

OUT="${1:-${TMPDIR:-/tmp}/envkit-gpu-smoke}"
STEPS="${2:-5}"
PYTHON="${PYTHON:-python}"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TRL_EXPERIMENTAL_SILENCE=1

"$PYTHON" - <<'EOF' || exit 1
import sys
try:
    import vllm
    from vllm.platforms import current_platform
except ImportError as error:
    sys.exit(f"gpu_smoke: vLLM is not installed ({error}); pip install -e '.[gpu]' on an NVIDIA GPU, or on CPU "
             "the install lines of docs/vllm-cpu.md")
import torch
if current_platform.is_cuda_alike():
    device = torch.cuda.get_device_name(0)
elif current_platform.is_cpu():
    device = f"CPU (vLLM's CPU build), {torch.get_num_threads()} threads"
else:
    sys.exit("gpu_smoke: the installed vLLM finds no device it can run on here")
print(f"gpu_smoke: {device}, torch {torch.__version__}, vllm {vllm.__version__}")
EOF

PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
mkdir -p "$OUT"
"$PYTHON" -m envkit.cli serve echo --port "$PORT" --max-concurrent-envs 64 --log-level warning >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT

for _ in $(seq 1 60); do
    if "$PYTHON" -c "import httpx, sys; httpx.get('http://127.0.0.1:$PORT/health', trust_env=False).raise_for_status()" \
        2>/dev/null; then
        break
    fi
    kill -0 "$SERVER" 2>/dev/null || { echo "gpu_smoke: the echo server exited:" >&2; cat "$OUT/server.log" >&2; exit 1; }
    sleep 0.5
done

STARTED=$(date +%s)
"$PYTHON" -m envkit.cli train --env echo --env-url "http://127.0.0.1:$PORT" --model tiny \
    --vllm-mode colocate --vllm-gpu-memory-utilization 0.2 --max-steps "$STEPS" \
    --output-dir "$OUT" --json >"$OUT/summary.json"
ELAPSED=$(( $(date +%s) - STARTED ))

"$PYTHON" - "$OUT/summary.json" "$ELAPSED" <<'EOF'
import json
import sys

summary = json.load(open(sys.argv[1]))
print(f"gpu_smoke: {summary['steps']} GRPO steps with colocated vLLM, {sys.argv[2]}s for the whole command")
print(f"  time per step        {summary['seconds_per_step']:.2f} s ({summary['env_share']:.0%} in environment calls)")
print(f"  reward start -> end  {summary['start'].get('reward', float('nan')):.3f} -> "
      f"{summary['end'].get('reward', float('nan')):.3f}")
print(f"  tool calls/episode   {summary['start'].get('tool_calls_per_episode', float('nan')):.2f} -> "
      f"{summary['end'].get('tool_calls_per_episode', float('nan')):.2f}")
print(f"  episodes             {summary['episodes']} played, {summary['lost']} lost")
for name, path in summary["files"].items():
    print(f"  {name:20} {path}")
EOF
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
fi
"$PYTHON" -c "import httpx; print('server health:', httpx.get('http://127.0.0.1:$PORT/health', trust_env=False).text)"
