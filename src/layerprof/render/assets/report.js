/* layerprof HTML report: charts from the embedded JSON, plus table sorting and filtering.
   Everything the page shows as text is rendered server-side and escaped; this script
   only draws charts (plotly.js, inlined above) and rearranges existing table rows. */
(function () {
  'use strict';

  var DATA = JSON.parse(document.getElementById('lp-data').textContent);
  var FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';
  var C = {
    accent: '#2f5bea', soft: 'rgba(47,91,234,0.22)', bad: '#c0392b', good: '#1e8449',
    muted: '#9aa5b1', warn: '#d68910', info: '#2874a6', ink: '#1d2733', grid: '#e6eaef'
  };
  var HEAT = [[0, '#fff5cc'], [0.2, '#fed976'], [0.45, '#fd8d3c'], [0.7, '#e31a1c'], [1, '#7f0026']];
  var CONFIG = {
    displaylogo: false, responsive: true, showSendToCloud: false, showLink: false,
    modeBarButtonsToRemove: ['lasso2d', 'select2d', 'autoScale2d'],
    toImageButtonOptions: { format: 'png', scale: 2 }
  };

  function layout(extra) {
    var base = {
      font: { family: FONT, size: 12, color: C.ink },
      margin: { l: 56, r: 16, t: 58, b: 44 },
      paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: 'rgba(0,0,0,0)',
      hoverlabel: { font: { family: FONT } },
      xaxis: { gridcolor: C.grid, zerolinecolor: C.grid, automargin: true },
      yaxis: { gridcolor: C.grid, zerolinecolor: C.grid, automargin: true },
      legend: { orientation: 'h', x: 1, xanchor: 'right', y: 1.01, yanchor: 'bottom', bgcolor: 'rgba(0,0,0,0)' }
    };
    for (var k in extra) {
      if (typeof extra[k] === 'object' && extra[k] && !Array.isArray(extra[k]) && base[k]) {
        base[k] = Object.assign({}, base[k], extra[k]);
      } else {
        base[k] = extra[k];
      }
    }
    return base;
  }

  function title(text) {
    return { text: text, x: 0, xref: 'paper', xanchor: 'left', y: 1, yref: 'container', yanchor: 'top',
      pad: { t: 8 }, font: { size: 14, weight: 600 } };
  }

  function plot(id, traces, lay) {
    var el = document.getElementById(id);
    if (!el) return null;
    if (lay.height) {  // the div sets the size; plotly's responsive mode follows it
      el.style.height = lay.height + 'px';
      delete lay.height;
    }
    Plotly.newPlot(el, traces, layout(lay), CONFIG);
    return el;
  }

  function fmt(x) {
    if (x === null || x === undefined) return '–';
    var a = Math.abs(x);
    if (a === 0) return '0';
    if (a < 0.01) return x.toFixed(4);
    if (a < 1) return x.toFixed(3);
    if (a < 100) return x.toFixed(2);
    return x.toFixed(1);
  }

  function range(n, start) {
    var out = [];
    for (var i = 0; i < n; i++) out.push(i + (start || 0));
    return out;
  }

  function hbarHeight(n) { return Math.max(260, 60 + 24 * n); }

  function colour(name) { return C[name] || C.accent; }

  // ------------------------------------------------------------- kind "latency"
  // {samples_ms, first_ms, median_ms, p90_ms, x_title}: the iterations and their histogram,
  // drawn into the slot's two children ID-iter and ID-hist
  function drawLatency(id, d) {
    var s = d.samples_ms, max = Math.max.apply(null, s), min = Math.min.apply(null, s);
    var traces = [{
      type: 'scatter', mode: 'lines+markers', name: 'steady state',
      x: range(s.length, 1), y: s, line: { width: 1.2, color: C.accent }, marker: { size: 5 },
      hovertemplate: '%{x}: %{y:.4f} ms<extra></extra>'
    }];
    var lay = {
      title: title('Per ' + d.x_title.split(' ')[0]), showlegend: true,
      xaxis: { title: { text: d.x_title }, range: [-0.8, s.length + 0.8] },
      yaxis: { title: { text: 'ms' } }, shapes: [], annotations: []
    };
    var pad = (max - min) * 0.15 || max * 0.05 || 1;
    if (d.first_ms !== null && d.first_ms !== undefined) {
      var off = d.first_ms > max + 4 * pad;
      var top = max + 2 * pad;
      traces.push({
        type: 'scatter', mode: 'markers', name: 'first call (cold)',
        x: [0], y: [off ? top : d.first_ms],
        marker: { size: 12, color: C.bad, symbol: off ? 'triangle-up' : 'diamond' },
        hovertemplate: 'first call (cold): ' + fmt(d.first_ms) + ' ms<extra></extra>'
      });
      if (off) {
        lay.yaxis.range = [Math.max(0, min - pad), top + pad];
        lay.annotations.push({
          x: 0, y: top, xanchor: 'left', yanchor: 'middle', xshift: 10, showarrow: false,
          text: 'cold: ' + fmt(d.first_ms) + ' ms (off scale)', font: { color: C.bad, size: 11 }
        });
      }
    }
    lay.shapes.push({ type: 'line', xref: 'paper', x0: 0, x1: 1, y0: d.median_ms, y1: d.median_ms,
      line: { color: C.ink, width: 1, dash: 'dot' } });
    plot(id + '-iter', traces, lay);

    var hist = [{
      type: 'histogram', x: s, name: 'iterations',
      nbinsx: Math.min(40, Math.max(8, Math.round(Math.sqrt(s.length) * 2))),
      marker: { color: C.soft, line: { color: C.accent, width: 1 } },
      hovertemplate: '%{x} ms: %{y}<extra></extra>'
    }];
    var hl = {
      title: title('Distribution (steady state)'), bargap: 0.04, showlegend: false,
      xaxis: { title: { text: 'ms' } }, yaxis: { title: { text: 'count' } },
      shapes: [], annotations: []
    };
    [['median', d.median_ms, 'solid'], ['p90', d.p90_ms, 'dash']].forEach(function (m) {
      hl.shapes.push({ type: 'line', yref: 'paper', y0: 0, y1: 1, x0: m[1], x1: m[1],
        line: { color: C.ink, width: 1.2, dash: m[2] } });
      hl.annotations.push({ x: m[1], yref: 'paper', y: m[0] === 'p90' ? 0.9 : 1, yanchor: 'top',
        xanchor: 'left', xshift: 3, showarrow: false, bgcolor: 'rgba(255,255,255,0.85)',
        text: m[0] + ' ' + fmt(m[1]), font: { size: 11 } });
    });
    plot(id + '-hist', hist, hl);
  }

  // ------------------------------------------------------------- kind "tree"
  // {ids, parents, labels, values, self_ms, custom, maxdepth}: icicle, or treemap on a click
  function hierTrace(t, type) {
    var trace = {
      type: type, ids: t.ids, parents: t.parents, labels: t.labels, values: t.values,
      branchvalues: 'total', sort: false, customdata: t.custom, maxdepth: t.maxdepth,
      marker: {
        colors: t.self_ms, colorscale: HEAT, cmin: 0, cmax: Math.max.apply(null, t.self_ms) || 1,
        showscale: true,
        colorbar: { title: { text: 'self ms', side: 'right' }, thickness: 12, len: 0.9 },
        line: { width: 1, color: '#ffffff' }
      },
      texttemplate: '<b>%{label}</b><br>%{customdata[2]}',
      hovertemplate: '<b>%{customdata[0]}</b><br>%{customdata[1]}<br>' +
        'total %{customdata[2]} · self %{customdata[3]}<br>' +
        '%{customdata[4]} of forward · %{customdata[5]} calls<extra></extra>',
      pathbar: { visible: true, thickness: 22 }
    };
    if (type === 'icicle') trace.tiling = { orientation: 'h' };
    return trace;
  }

  function drawTree(id, t) {
    var el = document.getElementById(id);
    if (!el) return;
    var lay = { margin: { l: 4, r: 4, t: 4, b: 4 } };
    Plotly.newPlot(el, [hierTrace(t, 'icicle')], layout(lay), CONFIG);
    document.querySelectorAll('button[data-hier]').forEach(function (btn) {
      btn.addEventListener('click', function () {
        document.querySelectorAll('button[data-hier]').forEach(function (b) {
          b.classList.toggle('on', b === btn);
        });
        Plotly.react(el, [hierTrace(t, btn.getAttribute('data-hier'))], layout(lay), CONFIG);
      });
    });
  }

  // ------------------------------------------------------------- kind "bars"
  // {title, labels, hover, series: [{name, values, colour, colours}], axis, stack}
  function drawBars(id, d) {
    var traces = d.series.map(function (s) {
      return {
        type: 'bar', orientation: 'h', name: s.name, y: d.labels, x: s.values,
        customdata: d.hover,
        marker: { color: s.colours ? s.colours.map(colour) : colour(s.colour) },
        hovertemplate: '%{customdata}<br>' + s.name + ' %{x:.4f} ' + d.axis + '<extra></extra>'
      };
    });
    plot(id, traces, {
      title: title(d.title), barmode: d.stack ? 'stack' : 'group', showlegend: d.series.length > 1,
      height: hbarHeight(d.labels.length),
      xaxis: { title: { text: d.axis }, zeroline: true, zerolinecolor: C.ink },
      yaxis: { autorange: 'reversed', type: 'category' }
    });
  }

  // ------------------------------------------------------------- kind "steps"
  // {title, series: [{name, steps, ms}]}: bars when few steps, else lines
  function drawSteps(id, d) {
    var total = d.series.reduce(function (a, s) { return a + s.ms.length; }, 0);
    var asBars = total <= 60;
    var traces = d.series.map(function (s) {
      return {
        type: asBars ? 'bar' : 'scatter', mode: asBars ? undefined : 'lines+markers', name: s.name,
        x: range(s.ms.length), y: s.ms, customdata: s.steps,
        hovertemplate: s.name + ' · %{customdata}: %{y:.3f} ms<extra></extra>'
      };
    });
    plot(id, traces, {
      title: title(d.title), barmode: 'group', showlegend: d.series.length > 1,
      xaxis: { title: { text: 'step' }, dtick: total <= 30 ? 1 : undefined },
      yaxis: { title: { text: 'ms' } }
    });
  }

  // ------------------------------------------------------------- tables
  function cellKey(row, i, num) {
    var cell = row.cells[i];
    if (!cell) return num ? -Infinity : '';
    if (num) {
      var v = cell.getAttribute('data-v');
      return v === null || v === '' ? -Infinity : parseFloat(v);
    }
    return cell.textContent.toLowerCase();
  }

  function sortTable(table, th) {
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var num = th.getAttribute('data-sort') === 'num';
    var cur = th.getAttribute('aria-sort');
    var dir = cur ? (cur === 'descending' ? 'ascending' : 'descending') : (num ? 'descending' : 'ascending');
    var sign = dir === 'ascending' ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
      return { row: r, key: cellKey(r, idx, num), i: i };
    });
    rows.sort(function (a, b) {
      if (a.key < b.key) return -sign;
      if (a.key > b.key) return sign;
      return a.i - b.i;
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r.row); });
    body.appendChild(frag);
    table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', dir);
  }

  function setupTables() {
    document.querySelectorAll('table.sortable').forEach(function (table) {
      table.querySelectorAll('th[data-sort]').forEach(function (th) {
        th.tabIndex = 0;
        th.addEventListener('click', function () { sortTable(table, th); });
        th.addEventListener('keydown', function (e) {
          if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortTable(table, th); }
        });
      });
    });
    document.querySelectorAll('input.filter').forEach(function (input) {
      var table = document.getElementById(input.getAttribute('data-table'));
      var count = document.querySelector('[data-count-for="' + table.id + '"]');
      var rows = Array.prototype.slice.call(table.tBodies[0].rows);
      var text = rows.map(function (r) { return r.textContent.toLowerCase(); });
      input.addEventListener('input', function () {
        var q = input.value.trim().toLowerCase(), shown = 0;
        rows.forEach(function (r, i) {
          var ok = !q || text[i].indexOf(q) !== -1;
          r.hidden = !ok;
          if (ok) shown++;
        });
        if (count) count.textContent = q ? shown + ' of ' + rows.length + ' rows' : rows.length + ' rows';
      });
    });
  }

  // ------------------------------------------------------------- main
  // DATA maps a chart slot's id to its data; "kind" picks the drawing function
  // (render/html/charts.py has one dataclass per kind).
  var KINDS = { latency: drawLatency, tree: drawTree, bars: drawBars, steps: drawSteps };
  setupTables();
  Object.keys(DATA).forEach(function (id) {
    var d = DATA[id], draw = d && KINDS[d.kind];
    try {
      if (!draw) throw new Error('unknown chart kind ' + (d && d.kind));
      draw(id, d);
    } catch (err) {
      console.error('layerprof: could not draw ' + id + ': ' + err);
    }
  });
  document.documentElement.setAttribute('data-lp-ready', '1');
})();
