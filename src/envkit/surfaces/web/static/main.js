// The page: header, the two views (#play, #replay) and loading the server's documents.

import { fill, h } from "./dom.js";
import { renderPlay } from "./play.js";
import { renderReplay } from "./replay.js";
import { apiKey, getJSON, setApiKey } from "./server.js";

const views = { play: document.getElementById("view-play"), replay: document.getElementById("view-replay") };
const banner = document.getElementById("banner");

function showView() {
  const name = location.hash === "#replay" ? "replay" : "play";
  for (const [key, view] of Object.entries(views)) {
    view.hidden = key !== name;
    document.getElementById(`tab-${key}`).classList.toggle("active", key === name);
  }
}

function showBanner(messages) {
  banner.hidden = !messages.length;
  fill(banner, messages.map((message) => h("div", {}, message)));
}

let play = null;

/** Read /metadata, /schema, /tools, /web/reset-arguments and /splits, then (re)build the play view (ending the
 * session of the last one). */
async function loadPlay() {
  const problems = [];
  const fetchOr = async (path) => {
    try {
      return await getJSON(path);
    } catch (error) {
      problems.push(error.message);
      return null;
    }
  };
  const [metadata, schema, tools, resetArguments, splits] = await Promise.all(
    ["/metadata", "/schema", "/tools", "/web/reset-arguments", "/splits"].map(fetchOr));
  showBanner(problems);
  if (metadata) {
    document.getElementById("env-name").textContent = String(metadata.name ?? "environment");
    document.getElementById("env-description").textContent = String(metadata.description ?? "");
    document.title = `${metadata.name} · envkit`;
  }
  if (play) play.dispose();
  play = null;
  if (!metadata && !schema && !tools) {
    fill(views.play, h("p", { class: "muted" }, "The server's documents could not be read (see above), so there is nothing to play. The Replay view works without them."));
    return;
  }
  play = renderPlay(views.play, { schema, tools, resetArguments, splits: Array.isArray(splits) ? splits : [] });
}

const keyInput = document.getElementById("api-key");
keyInput.value = apiKey();
setApiKey(apiKey());   // the cookie follows the key kept for this tab
document.getElementById("api-key-form").addEventListener("submit", (event) => event.preventDefault());
keyInput.addEventListener("change", () => {
  setApiKey(keyInput.value.trim());
  loadPlay();
});
window.addEventListener("hashchange", showView);
showView();
renderReplay(views.replay);
loadPlay();
