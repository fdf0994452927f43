// Talking to the envkit server that serves this page: HTTP documents and the /ws session protocol.

const KEY_STORAGE = "envkit.apiKey";
/** The cookie the server reads the key from: the browser sends it with every request to this server,
 * WebSocket handshakes included (which cannot carry headers). A session cookie: gone with the browser. */
const KEY_COOKIE = "envkit_api_key";

/** The server's base path: the page lives at BASE/web. */
export const BASE = location.pathname.replace(/\/web\/?$/, "");

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
  const path = `path=${BASE || "/"}; SameSite=Strict${location.protocol === "https:" ? "; Secure" : ""}`;
  document.cookie = key ? `${KEY_COOKIE}=${encodeURIComponent(key)}; ${path}` : `${KEY_COOKIE}=; Max-Age=0; ${path}`;
}

/** GET a JSON document of the server; throws an Error whose message says what went wrong. */
export function getJSON(path) {
  return requestJSON(path, { method: "GET" });
}

/** POST a JSON body and read the JSON answer; errors as `getJSON`. */
export function postJSON(path, body) {
  return requestJSON(path, { method: "POST", body: JSON.stringify(body), contentType: "application/json" });
}

async function requestJSON(path, { method, body, contentType }) {
  const headers = { Accept: "application/json" };
  if (contentType) headers["Content-Type"] = contentType;
  if (apiKey()) headers["X-API-Key"] = apiKey();
  let response;
  try {
    response = await fetch(BASE + path, { method, headers, body, cache: "no-store" });
  } catch (error) {
    throw new Error(`cannot reach the server for ${path}: ${error.message}`);
  }
  let answer = null;
  try {
    answer = await response.json();
  } catch (error) {
    answer = null;
  }
  if (!response.ok) {
    const detail = answer && answer.detail !== undefined ? (typeof answer.detail === "string" ? answer.detail : JSON.stringify(answer.detail)) : response.statusText;
    const hint = response.status === 401 || response.status === 403 ? " — enter the server's API key at the top right" : "";
    throw new Error(`${path}: HTTP ${response.status} ${detail}${hint}`);
  }
  if (answer === null) throw new Error(`${path}: the server did not answer with JSON`);
  return answer;
}

/** The /ws URL of this server, asking for the text rendering of observations and the episode's metrics
 * (the API key travels in the cookie `setApiKey` sets). */
export function socketURL() {
  const url = new URL(BASE + "/ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("features", "text,metrics");
  return url.toString();
}

const CLOSE_REASONS = {
  1000: "closed normally",
  1001: "the server shut down",
  1006: "the connection dropped without a close frame",
  1009: "a message was too big",
  1011: "server error",
  1012: "the server is restarting",
  1013: "the server is at capacity",
  4408: "closed after being idle too long",
};

/** Why a socket closed, in words. */
export function closeReason(event) {
  const why = event.reason || CLOSE_REASONS[event.code] || "closed";
  return `${why} (close code ${event.code})`;
}

/** A reply that did not come, because the session ended. */
export class SessionLost extends Error {}

/**
 * One session: one WebSocket, frames answered in order. `onEvent(kind, detail)` hears
 * "open", "close" (with the reason) and every frame sent ("sent") and received ("received").
 */
export class Connection {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.socket = null;
    this.pending = [];
    this.lost = null;     // why the session ended, once it has
  }

  get open() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  /** Open the socket; resolves once it is open, rejects if it cannot open. */
  connect() {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(socketURL());
      this.socket = socket;
      this.lost = null;
      let opened = false;
      socket.onopen = () => {
        opened = true;
        this.onEvent("open");
        resolve();
      };
      socket.onmessage = (event) => this.received(event.data);
      socket.onclose = (event) => {
        if (this.socket !== socket) return;
        this.lost = closeReason(event);
        for (const waiter of this.pending.splice(0)) waiter.reject(new SessionLost(`session ended: ${this.lost}`));
        this.onEvent("close", this.lost);
        if (!opened) reject(new SessionLost(`cannot open a session: ${this.lost}`));
      };
    });
  }

  received(text) {
    this.onEvent("received", text);
    let frame;
    try {
      frame = JSON.parse(text);
    } catch (error) {
      frame = { type: "error", data: { code: "BAD_REPLY", message: `the server sent something that is not JSON: ${text.slice(0, 200)}` } };
    }
    const waiter = this.pending.shift();
    if (waiter) waiter.resolve(frame);
    else this.onEvent("unsolicited", frame);
  }

  /** Send one frame (an object, or text sent exactly as given) and wait for its reply frame. */
  request(frame) {
    const text = typeof frame === "string" ? frame : JSON.stringify(frame);
    if (!this.open) return Promise.reject(new SessionLost(this.lost ? `session ended: ${this.lost}` : "no session is open"));
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.onEvent("sent", text);
      this.socket.send(text);
    });
  }

  /** Ask the server to end the session; resolves when the socket has closed. */
  close() {
    const socket = this.socket;
    if (!socket || socket.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      socket.addEventListener("close", () => resolve(), { once: true });
      if (socket.readyState === WebSocket.OPEN) {
        const text = JSON.stringify({ type: "close" });
        this.onEvent("sent", text);
        socket.send(text);
      } else {
        socket.close();
      }
    });
  }
}
