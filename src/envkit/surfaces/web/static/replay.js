// The replay view: load transcript files, list the games, show the models that played one game side by side.

import { chip, compact, fill, h, number } from "./dom.js";
import { columnLabels, groupGames, parseTranscripts, summarise } from "./transcripts.js";
import { turnView } from "./turns.js";

const MAX_PROBLEMS_SHOWN = 20;

/** Build the replay view in `root`. Files are read in the browser; nothing is sent to the server. */
export function renderReplay(root) {
  const files = [];        // {name, games, problems}
  let selected = null;     // key of the game shown

  const input = h("input", { id: "transcript-files", type: "file", multiple: true, accept: ".jsonl,.json,.txt", class: "file-input",
    onchange: () => { load(input.files); input.value = ""; } });
  const drop = h("div", { id: "drop-zone", class: "drop-zone" },
    h("strong", {}, "Drop transcript files here"),
    h("span", { class: "muted" }, " (JSONL, one game per line, as envkit eval writes them) or "),
    h("button", { type: "button", id: "choose-files", class: "secondary", onclick: () => input.click() }, "Choose files…"),
    h("button", { type: "button", id: "clear-files", class: "secondary", onclick: clear }, "Clear"),
    input);
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("dragging"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("dragging"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("dragging");
    if (event.dataTransfer && event.dataTransfer.files.length) load(event.dataTransfer.files);
  });
  const fileList = h("ul", { id: "loaded-files", class: "file-list" });
  const problems = h("ul", { id: "transcript-problems", class: "problems" });
  const summary = h("div", { id: "replay-summary", class: "table-wrap" });
  const filter = h("input", { id: "game-filter", type: "search", placeholder: "Filter games", oninput: () => drawGames() });
  const gameList = h("div", { id: "game-list", class: "game-list" });
  const compare = h("div", { id: "compare" });

  fill(root, h("div", { class: "replay" },
    h("section", { class: "card" }, h("h2", {}, "Transcripts"), drop, fileList, problems),
    h("section", { class: "card", id: "summary-card" }, h("h2", {}, "Models"), summary),
    h("div", { class: "replay-main" },
      h("aside", { class: "card games" }, h("h2", {}, "Games"), filter, gameList),
      h("section", { class: "card compare-card" }, compare))));
  draw();

  async function load(fileObjects) {
    for (const file of Array.from(fileObjects)) {
      let text;
      try {
        text = await file.text();
      } catch (error) {
        files.push({ name: file.name, games: [], problems: [`${file.name}: cannot be read (${error.message})`] });
        continue;
      }
      files.push({ name: file.name, ...parseTranscripts(file.name, text) });
    }
    draw();
  }

  function clear() {
    files.splice(0);
    selected = null;
    draw();
  }

  function allGames() {
    return files.flatMap((file) => file.games);
  }

  function draw() {
    fill(fileList, files.map((file) => h("li", {}, h("code", {}, file.name), ` — ${file.games.length} game${file.games.length === 1 ? "" : "s"}`,
      file.problems.length ? h("span", { class: "bad-text" }, `, ${file.problems.length} problem${file.problems.length === 1 ? "" : "s"}`) : null)));
    const allProblems = files.flatMap((file) => file.problems);
    fill(problems, allProblems.slice(0, MAX_PROBLEMS_SHOWN).map((problem) => h("li", { class: "error" }, problem)),
      allProblems.length > MAX_PROBLEMS_SHOWN ? h("li", { class: "muted" }, `and ${allProblems.length - MAX_PROBLEMS_SHOWN} more`) : null);
    drawSummary();
    const groups = groupGames(allGames());
    if (!groups.some((group) => group.key === selected)) selected = groups.length ? groups[0].key : null;
    drawGames();
    drawCompare();
  }

  function drawSummary() {
    const { metricNames, rows } = summarise(allGames());
    if (!rows.length) {
      fill(summary, h("p", { class: "muted" }, "No games loaded yet."));
      return;
    }
    fill(summary, h("table", { class: "summary" },
      h("thead", {}, h("tr", {}, ["model", "games", "finished", "lost", "mean reward", "mean turns", "failed calls", ...metricNames.map((name) => `${name} (mean)`)]
        .map((title) => h("th", {}, title)))),
      h("tbody", {}, rows.map((row) => h("tr", {},
        h("td", {}, row.model), h("td", {}, String(row.games)), h("td", {}, String(row.done)), h("td", {}, String(row.lost)),
        h("td", {}, number(row.reward)), h("td", {}, number(row.turns, 1)), h("td", {}, String(row.errors)),
        metricNames.map((name) => h("td", {}, number(row.metrics[name]))))))));
  }

  function drawGames() {
    const needle = filter.value.trim().toLowerCase();
    const groups = groupGames(allGames()).filter((group) => !needle || group.label.toLowerCase().includes(needle)
      || group.games.some((game) => game.model.toLowerCase().includes(needle)));
    if (!groups.length) {
      fill(gameList, h("p", { class: "muted" }, allGames().length ? "No game matches." : "Load transcripts to list their games."));
      return;
    }
    fill(gameList, groups.map((group) => h("button", {
      type: "button", class: `game${group.key === selected ? " selected" : ""}`, "data-models": String(group.games.length),
      onclick: () => { selected = group.key; drawGames(); drawCompare(); },
    }, h("span", { class: "game-label" }, group.label),
    h("span", { class: "game-chips" }, group.games.map((game) => chip(`${game.model} ${number(game.reward)}`,
      game.lost ? "bad" : typeof game.reward === "number" && game.reward > 0 ? "good" : ""))))));
  }

  function drawCompare() {
    const group = groupGames(allGames()).find((one) => one.key === selected);
    if (!group) {
      fill(compare, h("p", { class: "muted" }, "Pick a game to see every model that played it, turn by turn."));
      return;
    }
    const games = group.games;
    const labels = columnLabels(games);
    const rows = Math.max(0, ...games.map((game) => game.turns.length));
    const grid = h("div", { class: "compare-grid" });
    grid.style.setProperty("--columns", String(games.length));
    games.forEach((game, index) => grid.append(header(game, labels[index])));
    games.forEach((game) => grid.append(promptCell(game)));
    for (let turn = 0; turn < rows; turn += 1) {
      games.forEach((game) => grid.append(turn < game.turns.length
        ? turnView({ kind: "call", ...game.turns[turn] }, turn + 1) : h("div", { class: "turn empty" })));
    }
    games.forEach((game) => grid.append(chat(game)));
    fill(compare, h("h2", { id: "compare-title" }, group.label),
      h("p", { class: "muted" }, `${games.length} ${games.length === 1 ? "game" : "games side by side"}, ${rows} turn${rows === 1 ? "" : "s"} at most`),
      h("div", { class: "compare-scroll" }, grid));
  }
}

function header(game, label) {
  const outcome = game.lost ? chip("session lost", "bad") : game.done ? chip("done", "done") : chip("unfinished");
  const reward = game.reward === null ? chip("reward —") : chip(`reward ${number(game.reward)}`, game.reward > 0 ? "good" : game.reward < 0 ? "bad" : "");
  const metrics = Object.entries(game.metrics).map(([name, value]) => chip(`${name} ${typeof value === "number" ? number(value) : compact(value)}`, "metric"));
  return h("div", { class: "column-head" }, h("div", { class: "model" }, label),
    h("div", { class: "muted small" }, `${game.file} line ${game.line}`),
    h("div", { class: "chips" }, reward, outcome, metrics));
}

function promptCell(game) {
  const first = game.messages.find((message) => message.role === "user");
  if (!first) return h("div", { class: "prompt empty" });
  return h("details", { class: "prompt" }, h("summary", {}, "Prompt"), h("pre", {}, messageText(first.content)));
}

function chat(game) {
  if (!game.messages.length) return h("div", { class: "chat empty" });
  return h("details", { class: "chat" }, h("summary", {}, `Chat (${game.messages.length} messages)`),
    game.messages.map((message) => h("div", { class: `message role-${String(message.role).replace(/[^a-z]/g, "")}` },
      h("div", { class: "role" }, String(message.role ?? "?")),
      message.content ? h("pre", {}, messageText(message.content)) : null,
      Array.isArray(message.tool_calls) ? message.tool_calls.map((call) => h("code", { class: "tool-call" },
        `${call && call.name}(${compact(call && call.arguments)})`)) : null)));
}

function messageText(content) {
  return typeof content === "string" ? content : compact(content);
}
