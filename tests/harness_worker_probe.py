"""Run TRL 1.16's own harness rollout loop (`_HarnessRolloutLoop._run_session`, what `HarnessRolloutWorker` runs in
its child process) with envkit's `AgentSessionFactory`; print each rollout as one JSON line.

    python harness_worker_probe.py LLM_URL MODEL ENV ROLLOUTS

Needs trl 1.16 and openenv 0.10 beside envkit; no GPU: the loop's trainer side (weights over NCCL) is not involved.
"""

import json
import multiprocessing
import pickle
import sys

from datasets import Dataset
from transformers import AutoTokenizer
from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

from envkit.train.harness import AgentSessionFactory


def main() -> None:
    llm_url, model, env, rollouts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    factory = pickle.loads(pickle.dumps(AgentSessionFactory(env=env, llm_url=llm_url, model=model, max_calls=3,
                                                            max_tokens=48, timeout_s=120,
                                                            chat_template_kwargs={"enable_thinking": False})))
    tokenizer = AutoTokenizer.from_pretrained(model)
    context = multiprocessing.get_context("spawn")
    loop = _HarnessRolloutLoop(
        harness_session_factory=factory, model_name=model, dataset=Dataset.from_list([{"prompt": "task"}]),
        reward_funcs=[], processing_class=tokenizer, eos_token_ids=[tokenizer.eos_token_id],
        rollout_buffer=context.Queue(), model_version_value=context.Value("i", 0),
        heartbeat_value=context.Value("d", 0.0), failed_event=context.Event(), exception_info_queue=context.Queue(),
        metrics_queue=context.Queue(), vllm_server_url=llm_url.removesuffix("/v1"), temperature=1.0)
    loop._stop_event = context.Event()   # the loop's own stop event, which `_run_session` reads
    try:
        for group in range(rollouts):
            (completion, completion_ids, sequences, calls, failures, reward), metrics = loop._run_session("task", group)
            print(json.dumps({"reward": reward, "sequences": len(sequences), "completion_ids": len(completion_ids),
                              "trained": [int(sum(row.completion_mask)) for row in sequences],
                              "turns": None if metrics is None else metrics["turns"]}), flush=True)
    finally:
        loop._factory.close()
        loop._session_pool.shutdown(wait=True)


if __name__ == "__main__":
    main()
