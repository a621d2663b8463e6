"""Where AgentJet's config holds the values the tools read by name: one table of dotted config keys.

The linter's rules, AgentJetJob's checks (``job.check_keys``, for a release whose overrides table lacks
the kwarg) and ``swarm_status`` reading a dumped config all look keys up here. The keys are those of the
bundled releases; where a release's own overrides table names a key for a kwarg, that key wins.
"""

from __future__ import annotations

KEYS: dict[str, str] = {
    "max_env_worker": "ajet.rollout.max_env_worker",
    "num_repeat": "ajet.rollout.num_repeat",
    "train_batch_size": "ajet.data.train_batch_size",
    "n_gpus_per_node": "ajet.trainer_common.n_gpus_per_node",
    "nnodes": "ajet.trainer_common.nnodes",
    "interchange_method": "ajet.interchange_server.interchange_method",
    "max_prompt_length": "ajet.data.max_prompt_length",
    "max_response_length": "ajet.data.max_response_length",
    "max_model_len": "ajet.rollout.max_model_len",
    "max_response_length_in_one_turn": "ajet.rollout.max_response_length_in_one_turn",
    "lora_rank": "ajet.lora.lora_rank",
    "lora_load_format": "ajet.lora.load_format",
    "layered_summon": "ajet.lora.layered_summon",
    "lr": "ajet.trainer_common.optim.lr",
    "temperature": "ajet.rollout.temperature",
    "enable_swarm_mode": "ajet.enable_swarm_mode",
    "enable_interchange_server": "ajet.enable_interchange_server",
    "max_inference_tracker_threads": "ajet.interchange_server.max_inference_tracker_threads",
    "swarm_mode_sample_collection_method": "ajet.swarm_mode_sample_collection_method",
    "backbone": "ajet.backbone",
    "model_path": "ajet.model.path",
    "logger": "ajet.trainer_common.logger",
    "experiment_name": "ajet.experiment_name",
    "save_freq": "ajet.trainer_common.save_freq",
    "total_training_steps": "ajet.trainer_common.total_training_steps",
    "checkpoint_base_dir": "ajet.trainer_common.checkpoint_base_dir",
}
