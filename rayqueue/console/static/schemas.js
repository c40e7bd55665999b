// rayqueue console: the schema registry page (subjects, versions, latest schema id and type,
// compatibility level). Uses console.js's helpers; console.js routes /schemas here.
"use strict";

function schemasPage() {
  app.innerHTML = `<h1>Schemas</h1><p class="muted" id="registry-url"></p><div id="subjects"></div>`;
  every(async () => {
    const data = await api("GET", "/api/schemas");
    document.getElementById("registry-url").textContent = data.url
      ? `Schema registry at ${data.url} (Confluent's REST API)`
      : "This cluster runs no schema registry (schema.registry.listeners is empty).";
    document.getElementById("subjects").innerHTML = table(
      ["Subject", "Versions", "Deleted versions", {label: "Latest id", num: 1}, "Type", "Compatibility"],
      data.subjects.map(s => ({cells: [esc(s.subject), esc(ids(s.versions) || "-"), esc(ids(s.deleted_versions) || "-"),
        s.latest_id, esc(s.schema_type), esc(s.compatibility)]})),
      {id: "subjects-table", empty: "no subjects"});
  });
}
