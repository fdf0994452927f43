// Reading transcript files (JSONL, one game per line, format "envkit.transcript/1") and grouping
// the games so that the same game played by several models can be shown side by side.

export const FORMAT = "envkit.transcript/1";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** JSON with object keys sorted, so equal tasks get equal keys whatever order their keys came in. */
export function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (isObject(value)) return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(",")}}`;
  return JSON.stringify(value) ?? "null";
}

/** Parse one file's text: {games, problems}; a bad line is a problem naming the file and line, never a failure. */
export function parseTranscripts(fileName, text) {
  const games = [];
  const problems = [];
  const lines = String(text).split(/\r?\n/);
  lines.forEach((line, index) => {
    const where = `${fileName} line ${index + 1}`;
    if (!line.trim()) return;
    let record;
    try {
      record = JSON.parse(line);
    } catch (error) {
      problems.push(`${where}: not JSON (${error.message})`);
      return;
    }
    if (!isObject(record)) {
      problems.push(`${where}: expected a JSON object (one game per line)`);
      return;
    }
    if (!Array.isArray(record.turns)) {
      problems.push(`${where}: no "turns" list; is this an ${FORMAT} transcript?`);
      return;
    }
    if (record.format !== FORMAT) {
      problems.push(`${where}: format ${JSON.stringify(record.format ?? null)}, expected "${FORMAT}"; shown as far as it fits`);
    }
    games.push({
      file: fileName,
      line: index + 1,
      model: typeof record.model === "string" && record.model ? record.model : "(no model)",
      env: typeof record.env === "string" && record.env ? record.env : "(no env)",
      split: typeof record.split === "string" ? record.split : null,
      taskIndex: Number.isInteger(record.task_index) ? record.task_index : null,
      task: isObject(record.task) ? record.task : null,
      messages: Array.isArray(record.messages) ? record.messages.filter(isObject) : [],
      turns: record.turns.map((turn) => (isObject(turn) ? turn : { error: `not a turn: ${JSON.stringify(turn)}` })),
      reward: typeof record.reward === "number" ? record.reward : null,
      done: record.done === true,
      lost: record.lost === true,
      metrics: isObject(record.metrics) ? record.metrics : {},
    });
  });
  return { games, problems };
}

/** Which game a record is: the environment and the task (split, index and reset arguments). */
export function gameKey(game) {
  const hasTask = game.task !== null && Object.keys(game.task).length > 0;
  if (!hasTask && game.split === null && game.taskIndex === null) return `${game.env}\u0000${game.file}:${game.line}`;
  return `${game.env}\u0000${game.split}\u0000${game.taskIndex}\u0000${canonical(game.task)}`;
}

/** A short name for a game: "wordle · test #3 · {"secret_index":12}". */
export function gameLabel(game) {
  const parts = [game.env];
  if (game.split !== null || game.taskIndex !== null) parts.push(`${game.split ?? "?"} #${game.taskIndex ?? "?"}`);
  if (game.task !== null && Object.keys(game.task).length) parts.push(canonical(game.task));
  if (parts.length === 1) parts.push(`${game.file} line ${game.line}`);
  return parts.join(" · ");
}

/** Games grouped by `gameKey`, in the order first seen: [{key, label, games}]. */
export function groupGames(games) {
  const groups = new Map();
  for (const game of games) {
    const key = gameKey(game);
    if (!groups.has(key)) groups.set(key, { key, label: gameLabel(game), games: [] });
    groups.get(key).games.push(game);
  }
  return [...groups.values()].sort((a, b) => {
    const first = a.games[0];
    const second = b.games[0];
    return first.env.localeCompare(second.env) || String(first.split).localeCompare(String(second.split))
      || (first.taskIndex ?? Infinity) - (second.taskIndex ?? Infinity) || a.label.localeCompare(b.label);
  });
}

/** Column titles for games shown side by side: the model, with the file (and line) added where a model repeats. */
export function columnLabels(games) {
  return games.map((game) => {
    const sameModel = games.filter((other) => other.model === game.model);
    if (sameModel.length === 1) return game.model;
    const sameFile = sameModel.filter((other) => other.file === game.file);
    return sameFile.length === 1 ? `${game.model} (${game.file})` : `${game.model} (${game.file} line ${game.line})`;
  });
}

/** Per model: games, finished, lost, mean reward, mean turns, failed tool calls, and the mean of each numeric metric. */
export function summarise(games) {
  const byModel = new Map();
  for (const game of games) {
    if (!byModel.has(game.model)) byModel.set(game.model, []);
    byModel.get(game.model).push(game);
  }
  const metricNames = [...new Set(games.flatMap((game) => Object.keys(game.metrics).filter((key) => typeof game.metrics[key] === "number")))];
  const mean = (values) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : null);
  const rows = [...byModel.entries()].map(([model, played]) => ({
    model,
    games: played.length,
    done: played.filter((game) => game.done).length,
    lost: played.filter((game) => game.lost).length,
    reward: mean(played.map((game) => game.reward).filter((value) => value !== null)),
    turns: mean(played.map((game) => game.turns.length)),
    errors: played.reduce((total, game) => total + game.turns.filter((turn) => turn.error).length, 0),
    metrics: Object.fromEntries(metricNames.map((name) => [name,
      mean(played.map((game) => game.metrics[name]).filter((value) => typeof value === "number"))])),
  }));
  return { metricNames, rows };
}
