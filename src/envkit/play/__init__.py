"""Playing a model on served environments: what `envkit train` and `envkit eval` share.

`binding` turns a served environment into the tool class TRL's `environment_factory` takes; `tasks` reads an
environment's tasks into prompts; `loop` plays games turn by turn with a `Player` (`model_player`,
`policy_player`); `games` picks and scores them; `table` tabulates them; `models` and `tiny` load or build the
model; `embedded` serves environments inside the run. Neither `train` nor `evaluate` imports the other.
"""
