// A small SVG line chart of rayqueue's own: time on x, values on y, one line per series.
// series: [{name, color, points: [[t_seconds, value], ...]}]
function lineChart(series, opts) {
  opts = opts || {};
  const W = opts.width || 640, H = opts.height || 200, L = 56, R = 12, T = 12, B = 26;
  const all = series.flatMap(s => s.points);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const k in attrs) el.setAttribute(k, attrs[k]);
    if (text !== undefined) el.textContent = text;
    svg.appendChild(el);
    return el;
  };
  if (all.length < 2) {
    add("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, opts.empty || "collecting samples...");
    return svg;
  }
  const t0 = Math.min(...all.map(p => p[0])), t1 = Math.max(...all.map(p => p[0]));
  const top = Math.max(...all.map(p => p[1]));
  const vmax = top > 0 ? top * 1.1 : 1;  // an all-zero series still gets a readable axis
  const x = t => L + (W - L - R) * (t1 === t0 ? 1 : (t - t0) / (t1 - t0));
  const y = v => T + (H - T - B) * (1 - v / vmax);
  for (let i = 0; i <= 4; i++) {
    const v = vmax * i / 4;
    add("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eef1f5"});
    add("text", {x: L - 6, y: y(v) + 4, "text-anchor": "end"}, fmtNum(v));
  }
  add("text", {x: L, y: H - 8}, new Date(t0 * 1000).toLocaleTimeString());
  add("text", {x: W - R, y: H - 8, "text-anchor": "end"}, new Date(t1 * 1000).toLocaleTimeString());
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    add("path", {d, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name});
  }
  return svg;
}

function fmtNum(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1);
}
