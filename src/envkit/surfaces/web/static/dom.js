// Building the page from data without ever parsing data as markup: every string becomes a text node.

/** An element: `props` set attributes, properties (`value`, `checked`, ...) or listeners (`onclick`);
 * children are nodes or strings (inserted as text, never as HTML). */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.className = value;
    else if (key === "text") element.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
    else if (key === "value" || key === "checked" || key === "disabled" || key === "hidden") element[key] = value;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

/** Add children (nodes, strings, arrays of them; null and false are skipped) as nodes and text. */
export function append(element, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** Replace an element's children. */
export function fill(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

/** JSON for people: indented, and never throws. */
export function pretty(value) {
  try {
    const text = JSON.stringify(value, null, 2);
    return text === undefined ? String(value) : text;
  } catch (error) {
    return String(value);
  }
}

/** JSON on one line, for arguments and labels. */
export function compact(value) {
  try {
    const text = JSON.stringify(value);
    return text === undefined ? String(value) : text;
  } catch (error) {
    return String(value);
  }
}

/** A reward or other number as people read it; anything else as text. */
export function number(value, digits = 3) {
  if (typeof value !== "number" || !Number.isFinite(value)) return value === null || value === undefined ? "—" : String(value);
  return Number.isInteger(value) ? String(value) : value.toFixed(digits).replace(/0+$/, "").replace(/\.$/, "");
}

/** A small label: `chip("done", "good")`. */
export function chip(text, kind = "") {
  return h("span", { class: `chip ${kind}`.trim() }, text);
}

/** A chip saying whether an episode is over. */
export function doneChip(done) {
  return done === true ? chip("done", "done") : chip("running", "running");
}

/** A reward chip, coloured by sign. */
export function rewardChip(reward, label = "reward") {
  const kind = typeof reward !== "number" ? "" : reward > 0 ? "good" : reward < 0 ? "bad" : "";
  return chip(`${label} ${number(reward)}`, kind);
}
