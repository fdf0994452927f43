// One turn of an episode, drawn the same way in the play view and in replays.

import { chip, compact, doneChip, h, number } from "./dom.js";

/** What was sent: `guess({"guess": "[crane]"})`, `step {"action_id": 1}` or `reset {...}`. */
export function describeCall(turn) {
  if (turn.kind === "reset") return `reset ${compact(turn.arguments || {})}`;
  if (turn.kind === "step") return `step ${compact(turn.arguments || {})}`;
  if (turn.kind === "raw") return `raw frame ${turn.arguments}`;
  const args = turn.arguments && typeof turn.arguments === "object" ? compact(turn.arguments) : compact(turn.arguments ?? {});
  return `${typeof turn.tool === "string" ? turn.tool : compact(turn.tool)}(${args})`;
}

/**
 * A turn: {kind?: "reset"|"step"|"raw"|"call", tool, arguments, result (text), reward, done, error}.
 * `index` is shown before the call (null: no number).
 */
export function turnView(turn, index) {
  const hasReward = typeof turn.reward === "number";
  const head = h("div", { class: "turn-head" },
    index === null ? null : h("span", { class: "turn-index" }, `#${index}`),
    h("code", { class: "turn-call" }, describeCall(turn)),
    h("span", { class: "turn-chips" },
      hasReward ? chip(`reward ${number(turn.reward)}`, turn.reward > 0 ? "good" : turn.reward < 0 ? "bad" : "") : null,
      turn.done === true ? doneChip(true) : null));
  const result = turn.result === undefined || turn.result === null || turn.result === ""
    ? null : h("pre", { class: "turn-result" }, typeof turn.result === "string" ? trimBlankLines(turn.result) : compact(turn.result));
  const error = turn.error ? h("div", { class: "error turn-error", role: "alert" }, String(turn.error)) : null;
  return h("div", { class: `turn${turn.error ? " has-error" : ""}${turn.done === true ? " is-done" : ""}` }, head, result, error);
}

/** Text without the blank lines that open or close it (the rest, spaces included, as it was). */
function trimBlankLines(text) {
  return text.replace(/^(?:[ \t]*\r?\n)+/, "").replace(/(?:\r?\n[ \t]*)+$/, "");
}
