// The play view: reset, call tools, step and ask for the state over one /ws session, and watch the episode.

import { chip, compact, doneChip, fill, h, number, pretty, rewardChip } from "./dom.js";
import { objectForm } from "./forms.js";
import { Connection, SessionLost, postJSON } from "./server.js";
import { turnView } from "./turns.js";

const MAX_FRAMES_SHOWN = 100;
const MAX_FRAME_CHARS = 4000;

function card(id, title, ...children) {
  return h("section", { class: "card", id }, h("h2", {}, title), ...children);
}

function errorBox(id) {
  return h("div", { class: "error", id, role: "alert", hidden: true });
}

function showError(box, message) {
  box.textContent = message;
  box.hidden = !message;
}

/** Build the play view in `root` from the server's documents (`resetArguments` may be null; `splits` is the
 * `GET /splits` list); returns {dispose()}, which ends the view's session. */
export function renderPlay(root, { schema, tools, resetArguments, splits }) {
  const ui = {};
  const frames = [];
  let history = [];
  const taskCache = new Map();

  const connection = new Connection((kind, detail) => {
    if (kind === "open") setStatus("connected", "session open");
    else if (kind === "close") setStatus("ended", `session ended: ${detail}`);
    else if (kind === "sent" || kind === "received") logFrame(kind === "sent" ? "→" : "←", detail);
    else if (kind === "unsolicited") showError(ui.resetError, frameError(detail) || `unexpected frame: ${compact(detail)}`);
  });

  // ---- episode: task picker, reset form, session buttons -----------------------------------
  const resetSchema = resetArguments || { type: "object", properties: {}, additionalProperties: true };
  ui.resetForm = objectForm(resetSchema, resetSchema, "reset", { extra: resetSchema.additionalProperties === true });
  ui.resetError = errorBox("reset-error");
  ui.status = h("span", { id: "session-status", class: "status idle" }, "no session");
  const splitNames = splits.map((split) => (split && typeof split.name === "string" ? split.name : null)).filter(Boolean);
  let picker = null;
  if (splitNames.length) {
    ui.split = h("select", { id: "task-split", "aria-label": "split", onchange: () => loadTasks(ui.split.value).catch(() => {}) },
      splitNames.map((name) => h("option", { value: name }, name)));
    ui.taskIndex = h("input", { id: "task-index", type: "number", min: 0, value: "0", "aria-label": "task number" });
    ui.taskPreview = h("code", { id: "task-preview", class: "task-preview" });
    picker = h("div", { class: "task-picker" },
      h("span", { class: "field-name" }, "Task"), ui.split, h("span", { class: "muted" }, "#"), ui.taskIndex,
      h("button", { type: "button", id: "use-task", class: "secondary", onclick: useTask }, "Use task"),
      h("button", { type: "button", id: "random-task", class: "secondary", onclick: randomTask }, "Random"),
      ui.taskPreview);
  }
  const resetForm = h("form", { id: "reset-form", onsubmit: (event) => { event.preventDefault(); reset(); } },
    picker, ui.resetForm.element,
    h("div", { class: "buttons" },
      h("button", { type: "submit", id: "reset-button" }, "Reset"),
      h("button", { type: "button", id: "state-button", class: "secondary", onclick: askState }, "State"),
      h("button", { type: "button", id: "close-button", class: "secondary", onclick: endSession }, "End session"),
      ui.status),
    ui.resetError);

  // ---- tools ------------------------------------------------------------------------------
  const toolList = Array.isArray(tools && tools.tools) ? tools.tools : [];
  const toolForms = toolList.map((entry) => {
    const fn = entry.function || entry;
    const parameters = fn.parameters || { type: "object", properties: {} };
    const form = objectForm(parameters, parameters, `tool-${fn.name}`);
    const box = errorBox(`tool-${fn.name}-error`);
    const element = h("form", { class: "tool-form", "data-tool": fn.name,
      onsubmit: (event) => { event.preventDefault(); callTool(fn.name, form, box); } },
    h("div", { class: "tool-head" }, h("h3", {}, fn.name), h("button", { type: "submit", id: `call-${fn.name}` }, `Call ${fn.name}`)),
    fn.description ? h("p", { class: "hint" }, fn.description) : null,
    form.element, box);
    return element;
  });

  // ---- raw step and raw frame ------------------------------------------------------------
  const actionSchema = (schema && schema.action) || { type: "object", properties: {} };
  ui.stepForm = objectForm(actionSchema, actionSchema, "step");
  ui.stepError = errorBox("step-error");
  const stepForm = h("form", { id: "step-form", onsubmit: (event) => { event.preventDefault(); step(); } },
    h("p", { class: "hint" }, `A ${actionSchema.title || "action"} as /schema describes it, sent as {"type": "step"}.`),
    ui.stepForm.element,
    h("div", { class: "buttons" }, h("button", { type: "submit", id: "step-button" }, "Step")), ui.stepError);
  ui.rawInput = h("textarea", { id: "raw-frame", rows: 3, spellcheck: "false", placeholder: '{"type": "state"}' });
  ui.rawError = errorBox("raw-error");
  ui.rawReply = h("pre", { id: "raw-reply", class: "json", hidden: true });
  const rawForm = h("form", { id: "raw-form", onsubmit: (event) => { event.preventDefault(); sendRaw(); } },
    h("p", { class: "hint" }, "Any text, sent as one frame exactly as written; the reply shows below."),
    ui.rawInput, h("div", { class: "buttons" }, h("button", { type: "submit", id: "raw-button", class: "secondary" }, "Send frame")),
    ui.rawError, ui.rawReply);

  // ---- what came back --------------------------------------------------------------------
  ui.chips = h("div", { id: "observation-chips", class: "chips" }, chip("no episode yet"));
  ui.text = h("pre", { id: "observation-text", class: "observation-text" }, "Reset to start an episode.");
  ui.json = h("pre", { id: "observation-json", class: "json" }, "—");
  ui.state = h("pre", { id: "state-json", class: "json" }, "—");
  ui.history = h("div", { id: "history", class: "turns" });
  ui.frames = h("pre", { id: "frames", class: "frames" });

  fill(root, h("div", { class: "play" },
    h("div", { class: "column" },
      card("episode-card", "Episode", resetForm),
      toolForms.length ? card("tools-card", "Tools", ...toolForms) : null,
      card("step-card", "Step", stepForm),
      h("details", { class: "card", id: "raw-card" }, h("summary", {}, "Raw frame"), rawForm)),
    h("div", { class: "column" },
      card("observation-card", "Observation", ui.chips,
        h("h3", {}, "As the model reads it"), ui.text,
        h("details", { id: "observation-json-details" }, h("summary", {}, "As JSON"), ui.json)),
      card("history-card", "Episode so far", ui.history),
      card("state-card", "State", h("p", { class: "hint" }, "Press State to see it; it may hold what a player should not (an answer)."), ui.state),
      h("details", { class: "card", id: "frames-card" }, h("summary", {}, "Frames"), ui.frames))));

  // ---- behaviour ---------------------------------------------------------------------------
  const view = { dispose: () => connection.close() };
  if (splitNames.length) loadTasks(splitNames[0]).catch((error) => showError(ui.resetError, error.message));
  function setStatus(kind, text) {
    ui.status.className = `status ${kind}`;
    ui.status.textContent = text;
  }

  function logFrame(arrow, text) {
    frames.push(`${arrow} ${text.length > MAX_FRAME_CHARS ? `${text.slice(0, MAX_FRAME_CHARS)}… (${text.length} characters)` : text}`);
    if (frames.length > MAX_FRAMES_SHOWN) frames.splice(0, frames.length - MAX_FRAMES_SHOWN);
    ui.frames.textContent = frames.join("\n");
  }

  function frameError(frame) {
    if (!frame || frame.type !== "error") return null;
    const data = frame.data && typeof frame.data === "object" ? frame.data : {};
    return `${data.code || "ERROR"}: ${data.message || compact(frame.data)}`;
  }

  /** Send `frame` and wait for the reply. A session is opened when none ever was; after one has ended,
   * only a reset (`reconnect`) opens a new one: nothing else lands on a game the player did not start. */
  async function exchange(frame, box, { reconnect = false } = {}) {
    for (const shown of root.querySelectorAll(".error")) showError(shown, "");   // only the latest move's error stays up
    try {
      if (!connection.open) {
        if (connection.lost && !reconnect) throw new SessionLost(`the session ended (${connection.lost}); press Reset to start a new one`);
        setStatus("connecting", "connecting…");
        await connection.connect();
      }
      const reply = await connection.request(frame);
      const problem = frameError(reply);
      if (problem) {
        showError(box, problem);
        return { error: problem };
      }
      return { reply };
    } catch (error) {
      showError(box, error.message);
      return { error: error.message };
    }
  }

  function showObservation(text, observation, reward, done, metrics) {
    const metricChips = metrics && typeof metrics === "object" && !Array.isArray(metrics)
      ? Object.entries(metrics).map(([name, value]) => chip(`${name} ${typeof value === "number" ? number(value) : compact(value)}`, "metric")) : [];
    fill(ui.chips, rewardChip(reward), doneChip(done), metricChips,
      done === true ? h("span", { class: "muted" }, "Episode over: Reset to play again.") : null);
    ui.text.textContent = text === undefined || text === null ? "(the server sent no text rendering)" : String(text);
    ui.json.textContent = observation === null || observation === undefined ? "(the tool returned text only)" : pretty(observation);
    document.getElementById("observation-card").classList.toggle("is-done", done === true);
  }

  function addTurn(turn) {
    history.push(turn);
    const index = history.filter((one) => one.kind !== "reset").length;
    ui.history.append(turnView(turn, turn.kind === "reset" ? null : index));
    ui.history.scrollTop = ui.history.scrollHeight;
  }

  async function reset() {
    const { values, errors } = ui.resetForm.read();
    if (errors.length) return showError(ui.resetError, errors.join("; "));
    const { reply } = await exchange({ type: "reset", data: values }, ui.resetError, { reconnect: true });
    if (!reply) return;
    if (reply.type !== "observation") return showError(ui.resetError, `unexpected reply to reset: ${compact(reply)}`);
    const data = reply.data || {};
    showObservation(data.text, data.observation, data.reward, data.done, data.metrics);
    history = [];
    ui.history.replaceChildren();
    ui.state.textContent = "—";
    addTurn({ kind: "reset", arguments: values, result: data.text, reward: data.reward, done: data.done });
  }

  async function callTool(name, form, box) {
    const { values, errors } = form.read();
    if (errors.length) return showError(box, errors.join("; "));
    const { reply, error } = await exchange({ type: "call", data: { tool: name, args: values } }, box);
    if (!reply) return addTurn({ kind: "call", tool: name, arguments: values, error });
    const data = reply.data || {};
    showObservation(data.result, data.observation, data.reward, data.done, data.metrics);
    addTurn({ kind: "call", tool: name, arguments: values, result: data.result, reward: data.reward, done: data.done });
  }

  async function step() {
    const { values, errors } = ui.stepForm.read();
    if (errors.length) return showError(ui.stepError, errors.join("; "));
    const { reply, error } = await exchange({ type: "step", data: values }, ui.stepError);
    if (!reply) return addTurn({ kind: "step", arguments: values, error });
    const data = reply.data || {};
    showObservation(data.text, data.observation, data.reward, data.done, data.metrics);
    addTurn({ kind: "step", arguments: values, result: data.text, reward: data.reward, done: data.done });
  }

  async function askState() {
    const { reply } = await exchange({ type: "state" }, ui.resetError);
    if (reply) ui.state.textContent = pretty(reply.data);
  }

  async function endSession() {
    showError(ui.resetError, "");
    await connection.close();
  }

  async function sendRaw() {
    ui.rawReply.hidden = true;
    const { reply } = await exchange(ui.rawInput.value, ui.rawError);
    if (reply) {
      ui.rawReply.textContent = pretty(reply);
      ui.rawReply.hidden = false;
    }
  }

  /** The tasks of a split (`POST /tasks`, once per split); the task number's range follows them. */
  async function loadTasks(split) {
    if (!taskCache.has(split)) {
      const answer = await postJSON("/tasks", { split });
      taskCache.set(split, Array.isArray(answer.tasks) ? answer.tasks : []);
    }
    const list = taskCache.get(split);
    for (const option of ui.split.options) if (option.value === split) option.textContent = `${split} (${list.length})`;
    if (ui.split.value === split) ui.taskIndex.max = String(Math.max(0, list.length - 1));
    return list;
  }

  async function useTask() {
    showError(ui.resetError, "");
    try {
      const split = ui.split.value;
      const list = await loadTasks(split);
      const index = Number(ui.taskIndex.value);
      if (!Number.isInteger(index) || index < 0 || index >= list.length) {
        throw new Error(`split ${split} has tasks 0 to ${list.length - 1}; got ${ui.taskIndex.value || "nothing"}`);
      }
      const task = list[index];
      const unplaced = ui.resetForm.set(task);
      ui.taskPreview.textContent = `${split} #${index}: ${compact(task)}`;
      if (unplaced.length) showError(ui.resetError, `reset() takes no ${unplaced.join(", ")}; those task fields are left out`);
    } catch (error) {
      showError(ui.resetError, error.message);
    }
  }

  async function randomTask() {
    try {
      const list = await loadTasks(ui.split.value);
      ui.taskIndex.value = String(Math.floor(Math.random() * list.length));
    } catch (error) {
      return showError(ui.resetError, error.message);
    }
    await useTask();
  }

  return view;
}
