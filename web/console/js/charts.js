// charts.js — bar charts for the overview. Debian's Chart.js (window.Chart,
// from libjs-chart.js) when ax-api serves it; plain SVG bars otherwise.
// Colours come from the theme's CSS variables.
import {h, s, replace} from './dom.js';

function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

// spec: {labels: [...], series: [{name, color: '--ok', data: [...]}], stacked, unit}
export function barChart(box, spec) {
    if (window.Chart) return chartJs(box, spec);
    return svgBars(box, spec);
}

function chartJs(box, spec) {
    const fg = cssVar('--fg-muted'), grid = cssVar('--border');
    const datasets = spec.series.map(x => ({label: x.name, data: x.data,
        backgroundColor: cssVar(x.color), borderWidth: 0}));
    const theme = fg + grid;
    let c = box._chart;
    if (c && box._theme === theme && c.data.datasets.length === datasets.length) {
        c.data.labels = spec.labels;
        c.data.datasets.forEach((d, i) => { d.data = datasets[i].data; d.label = datasets[i].label; });
        c.update('none');
        return;
    }
    if (c) c.destroy();
    const canvas = h('canvas', {role: 'img', 'aria-label': spec.title || 'chart'});
    replace(box, h('div', {class: 'chart-box'}, canvas));
    const axis = {stacked: !!spec.stacked, ticks: {color: fg}, grid: {color: grid}};
    box._theme = theme;
    box._chart = new window.Chart(canvas, {
        type: 'bar',
        data: {labels: spec.labels, datasets},
        options: {animation: false, responsive: true, maintainAspectRatio: false,
            scales: {x: {...axis, ticks: {color: fg, maxRotation: 0, autoSkip: true}},
                y: {...axis, beginAtZero: true, title: {display: !!spec.unit, text: spec.unit, color: fg}}},
            plugins: {legend: {labels: {color: fg}}}},
    });
}

function svgBars(box, spec) {
    // one SVG unit per CSS pixel of the box, so text keeps its size
    const W = Math.max(280, Math.round(box.clientWidth) || 600), H = 180, pad = 24, n = spec.labels.length || 1;
    const totals = spec.labels.map((_, i) => spec.series.reduce((a, x) => a + (x.data[i] || 0), 0));
    const max = Math.max(1, ...(spec.stacked ? totals : spec.series.flatMap(x => x.data)));
    const bw = (W - pad) / n;
    const bars = [];
    spec.labels.forEach((label, i) => {
        let y = H - pad;
        spec.series.forEach((x, j) => {
            const v = x.data[i] || 0;
            const bh = (v / max) * (H - 2 * pad);
            const w = spec.stacked ? bw * 0.8 : (bw * 0.8) / spec.series.length;
            const xpos = pad + i * bw + (spec.stacked ? 0 : j * w);
            const yy = spec.stacked ? y - bh : H - pad - bh;
            if (v > 0) {
                const r = s('rect', {x: xpos, y: yy, width: w, height: bh, class: `bar c${x.color.replace(/^--/, '')}`},
                    s('title', null, `${label} ${x.name}: ${v}${spec.unit ? ' ' + spec.unit : ''}`));
                bars.push(r);
            }
            if (spec.stacked) y -= bh;
        });
    });
    const step = Math.ceil(n / 8);
    const ticks = spec.labels.map((l, i) => (i % step ? null :
        s('text', {x: pad + i * bw, y: H - 6, class: 'tick'}, l)));
    const legend = h('ul', {class: 'legend'}, spec.series.map(x =>
        h('li', null, h('span', {class: `swatch c${x.color.replace(/^--/, '')}`}), x.name)));
    replace(box, s('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'bars', role: 'img',
        'aria-label': spec.title || 'chart'},
    s('text', {x: 0, y: 12, class: 'tick'}, `max ${Math.round(max)}${spec.unit ? ' ' + spec.unit : ''}`),
    s('line', {x1: pad, y1: H - pad, x2: W, y2: H - pad, class: 'axis'}), bars, ticks), legend);
}

// A chart's Chart.js instance is released when its page goes.
export function destroyChart(box) {
    if (box && box._chart) {
        box._chart.destroy();
        box._chart = null;
    }
}
