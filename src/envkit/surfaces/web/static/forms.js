// Forms generated from JSON schemas (tool parameters, the action model, reset's arguments).
//
// Each field reads back as a JSON value or "unset"; a blank optional field is left out, so the
// server applies its own default and does all validation (its errors are shown where the form is).

import { compact, h, pretty } from "./dom.js";

const NOT_SET = "";

/** Follow a local `$ref` ("#/$defs/Name") inside `root`. */
function resolve(schema, root) {
  let current = schema || {};
  for (let depth = 0; current.$ref && depth < 16; depth += 1) {
    const path = current.$ref.replace(/^#\//, "").split("/");
    let target = root;
    for (const part of path) target = target && typeof target === "object" ? target[part] : undefined;
    if (!target) break;
    current = { ...target, ...Object.fromEntries(Object.entries(current).filter(([key]) => key !== "$ref")) };
  }
  return current;
}

/** What kind of input a schema needs: {kind, options, nullable}. */
export function describe(schema, root) {
  let resolved = resolve(schema, root);
  let nullable = resolved.nullable === true;
  const union = resolved.anyOf || resolved.oneOf;
  if (Array.isArray(union)) {
    const members = union.map((member) => resolve(member, root)).filter((member) => member.type !== "null");
    nullable = nullable || members.length < union.length;
    if (members.length === 1) resolved = { ...members[0], description: resolved.description, default: resolved.default };
    else return { kind: "json", nullable, schema: resolved };
  }
  if (Array.isArray(resolved.enum)) return { kind: "enum", options: resolved.enum, nullable, schema: resolved };
  if ("const" in resolved) return { kind: "enum", options: [resolved.const], nullable, schema: resolved };
  let type = resolved.type;
  if (Array.isArray(type)) {
    nullable = nullable || type.includes("null");
    const rest = type.filter((one) => one !== "null");
    type = rest.length === 1 ? rest[0] : undefined;
  }
  const kinds = { string: "string", integer: "integer", number: "number", boolean: "boolean" };
  return { kind: kinds[type] || "json", nullable, schema: resolved };
}

function label(name, required) {
  return h("span", { class: "field-name" }, name, required ? h("span", { class: "required", title: "required" }, "*") : null);
}

/** One input for property `name`; returns {element, name, optionalJSON, read(), set(value)}. */
export function field(name, schema, root, required, idPrefix) {
  const info = describe(schema, root);
  const spec = info.schema;
  const id = `${idPrefix}-${name}`;
  const hint = spec.description ? h("span", { class: "hint" }, spec.description) : null;
  const hasDefault = spec.default !== undefined && spec.default !== null;
  const placeholder = hasDefault ? `default: ${compact(spec.default)}` : required ? "" : "optional";
  let input;
  let read;
  let set;

  if (info.kind === "enum" || (info.kind === "boolean" && !required)) {
    const options = info.kind === "enum" ? info.options : [true, false];
    input = h("select", { id, name, "data-field": name });
    if (!required || hasDefault) input.append(h("option", { value: NOT_SET }, hasDefault ? `(default: ${compact(spec.default)})` : "(not set)"));
    options.forEach((option, index) => input.append(h("option", { value: String(index) }, typeof option === "string" ? option : compact(option))));
    read = () => (input.value === NOT_SET ? { unset: true } : { value: options[Number(input.value)] });
    set = (value) => {
      const index = options.findIndex((option) => compact(option) === compact(value));
      input.value = index < 0 ? NOT_SET : String(index);
    };
  } else if (info.kind === "boolean") {
    input = h("input", { id, name, type: "checkbox", "data-field": name, checked: spec.default === true });
    read = () => ({ value: input.checked });
    set = (value) => { input.checked = value === true; };
  } else if (info.kind === "integer" || info.kind === "number") {
    input = h("input", { id, name, type: "text", inputmode: info.kind === "integer" ? "numeric" : "decimal", placeholder, "data-field": name });
    read = () => {
      const text = input.value.trim();
      if (text === "") return { unset: true };
      const value = Number(text);
      if (!Number.isFinite(value) || (info.kind === "integer" && !Number.isInteger(value))) {
        return { error: `${name}: "${text}" is not ${info.kind === "integer" ? "a whole number" : "a number"}` };
      }
      return { value };
    };
    set = (value) => { input.value = value === undefined || value === null ? "" : String(value); };
  } else if (info.kind === "string") {
    input = h("input", { id, name, type: "text", placeholder, "data-field": name, autocomplete: "off", spellcheck: "false" });
    // an optional string left blank is not sent; a required one is sent as "" and the server judges it
    read = () => (input.value === "" && !required ? { unset: true } : { value: input.value });
    set = (value) => { input.value = value === undefined || value === null ? "" : String(value); };
  } else {
    input = h("textarea", { id, name, rows: 2, placeholder: hasDefault ? `JSON, default ${compact(spec.default)}` : "JSON", "data-field": name, spellcheck: "false" });
    read = () => {
      const text = input.value.trim();
      if (text === "") return { unset: true };
      try {
        return { value: JSON.parse(text) };
      } catch (error) {
        return { error: `${name}: not valid JSON (${error.message})` };
      }
    };
    set = (value) => { input.value = value === undefined ? "" : pretty(value); };
  }
  const element = h("label", { class: `field field-${info.kind}`, for: id }, label(name, required), input, hint);
  return { element, name, optionalJSON: info.kind === "json" && !required, read, set };
}

/**
 * A form for an object schema: one field per property. Optional JSON-valued fields (objects, lists,
 * `metadata`) fold into "More fields". `extra: true` adds a JSON object of further arguments.
 * Returns {element, fields, read() -> {values, errors}, set(values) -> names it could not place}.
 */
export function objectForm(schema, root, idPrefix, { extra = false } = {}) {
  const resolved = resolve(schema, root);
  const required = new Set(resolved.required || []);
  const fields = Object.entries(resolved.properties || {}).map(([name, property]) => field(name, property, root, required.has(name), idPrefix));
  const main = fields.filter((one) => !one.optionalJSON);
  const more = fields.filter((one) => one.optionalJSON);
  let extraInput = null;
  if (extra) {
    extraInput = h("textarea", { id: `${idPrefix}--extra`, rows: 2, placeholder: '{"name": value, ...}', "data-field": "(more arguments)", spellcheck: "false" });
    more.push({ element: h("label", { class: "field field-json", for: extraInput.id }, label("more arguments", false), extraInput,
      h("span", { class: "hint" }, "A JSON object of further keyword arguments.")) });
  }
  const element = h("div", { class: "fields" }, main.map((one) => one.element),
    more.length ? h("details", { class: "more-fields" }, h("summary", {}, "More fields"), more.map((one) => one.element)) : null,
    !fields.length && !extra ? h("p", { class: "hint" }, "No arguments.") : null);

  function read() {
    const values = {};
    const errors = [];
    for (const one of fields) {
      const result = one.read();
      if (result.error) errors.push(result.error);
      else if (!result.unset) values[one.name] = result.value;
    }
    if (extraInput && extraInput.value.trim()) {
      try {
        const parsed = JSON.parse(extraInput.value);
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) errors.push("more arguments: expected a JSON object");
        else Object.assign(values, parsed);
      } catch (error) {
        errors.push(`more arguments: not valid JSON (${error.message})`);
      }
    }
    return { values, errors };
  }

  function set(values) {
    const byName = new Map(fields.map((one) => [one.name, one]));
    const leftOver = {};
    for (const one of fields) one.set(undefined);
    for (const [name, value] of Object.entries(values || {})) {
      if (byName.has(name)) byName.get(name).set(value);
      else leftOver[name] = value;
    }
    if (extraInput) {
      extraInput.value = Object.keys(leftOver).length ? JSON.stringify(leftOver) : "";
      return [];
    }
    return Object.keys(leftOver);
  }

  return { element, fields, read, set };
}
