// Runs the app script of a layerprof HTML report in node, against a stub DOM and a stub
// Plotly that record what was drawn: `node html_script_harness.js page.html` prints
// {"plotted": [[slot id, traces, first trace's type], ...], "errors": [console errors]}.
// Used by tests/test_html_safety.py where no browser is at hand (the browser tests
// draw with the real plotly.js).
'use strict';
const fs = require('fs');

const page = fs.readFileSync(process.argv[2], 'utf8');
const data = page.match(/<script type="application\/json" id="lp-data">([\s\S]*?)<\/script>/)[1];
const scripts = [...page.matchAll(/<script>\n([\s\S]*?)\n<\/script>/g)].map((m) => m[1]);
const app = scripts[scripts.length - 1];
const ids = new Set([...page.matchAll(/\bid="([^"]+)"/g)].map((m) => m[1]));
const plotted = [];
const errors = [];

function element(id) {
  return { id, style: {}, setAttribute() {}, querySelectorAll() { return []; }, addEventListener() {} };
}

function check(traces, layout) {
  traces.forEach((t) => {
    ['x', 'y', 'values', 'labels', 'ids', 'parents'].forEach((k) => {
      if (t[k] !== undefined && !Array.isArray(t[k])) throw new Error(k + ' is not an array');
    });
    const n = t.type === 'bar' ? t.x.length : null;
    if (n !== null && t.y.length !== n) throw new Error('bar x and y differ in length');
  });
  if (!layout || typeof layout !== 'object') throw new Error('no layout');
}

global.document = {
  getElementById(id) {
    if (id === 'lp-data') return { textContent: data };
    return ids.has(id) ? element(id) : null;
  },
  querySelectorAll() { return []; },
  documentElement: { setAttribute() {} },
};
global.console = { error: (m) => errors.push(String(m)), log() {} };
global.Plotly = {
  newPlot(el, traces, layout) {
    check(traces, layout);
    plotted.push([el.id, traces.length, traces[0] && traces[0].type]);
  },
  react() {},
};
new Function(app)();
process.stdout.write(JSON.stringify({ plotted, errors }) + '\n');
