// dag.js — a flow's stages drawn as their DAG in SVG: stages in columns by
// depth (longest path from a stage without upstream), edges upstream →
// downstream, each stage coloured by its state in the shown run.
import {s} from './dom.js';

const W = 168, WV = 136, H = 46, GX = 56, GY = 18, PAD = 8;
const STATES = new Set(['pending', 'running', 'succeeded', 'failed', 'skipped']);

function layers(stages) {
    const by = new Map(stages.map(st => [st.name, st]));
    const depth = new Map();
    const visit = (name, seen) => {
        if (depth.has(name)) return depth.get(name);
        if (seen.has(name)) return 0;               // a cycle (the API refuses them)
        seen.add(name);
        const st = by.get(name);
        const ups = st && Array.isArray(st.after) ? st.after.filter(u => by.has(u)) : [];
        const d = ups.length ? 1 + Math.max(...ups.map(u => visit(u, seen))) : 0;
        depth.set(name, d);
        return d;
    };
    stages.forEach(st => visit(st.name, new Set()));
    const cols = [];
    for (const st of stages) (cols[depth.get(st.name)] ||= []).push(st);
    // order each column by the mean row of its upstream stages
    const row = new Map();
    cols.forEach(col => {
        const mean = st => {
            const ups = (st.after || []).filter(u => row.has(u));
            return ups.length ? ups.reduce((a, u) => a + row.get(u), 0) / ups.length : 0;
        };
        col.sort((a, b) => mean(a) - mean(b) || String(a.name).localeCompare(String(b.name)));
        col.forEach((st, i) => row.set(st.name, i));
    });
    return {cols, depth, row};
}

function clip(text, n) {
    const t = String(text ?? '');
    return t.length > n ? t.slice(0, n - 1) + '…' : t;
}

// The width the DAG needs left to right (a narrower box draws it top down).
export function dagWidth(stages) {
    const {cols} = layers(stages);
    return PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * GX;
}

function edgePath(a, b, vertical, w) {
    if (vertical) {
        const x1 = a.x + w / 2, y1 = a.y + H, x2 = b.x + w / 2, y2 = b.y - 4, my = (y1 + y2) / 2;
        return `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`;
    }
    const x1 = a.x + w, y1 = a.y + H / 2, x2 = b.x - 4, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    return `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`;
}

// stages: [{name, job, after: [...]}]; states: Map stage -> {state, instance_id};
// vertical: depth goes down instead of right (phone width).
export function drawDag(stages, states, onOpen, vertical = false) {
    const {cols, depth, row} = layers(stages);
    const rows = Math.max(1, ...cols.map(c => c.length));
    const w = vertical ? WV : W;
    // along: the depth axis (columns), across: the stages of one depth
    const along = PAD * 2 + cols.length * (vertical ? H : W) + Math.max(0, cols.length - 1) * GX;
    const across = PAD * 2 + rows * (vertical ? w : H) + (rows - 1) * GY;
    const width = vertical ? across : along, height = vertical ? along : across;
    const pos = name => (vertical
        ? {x: PAD + row.get(name) * (w + GY), y: PAD + depth.get(name) * (H + GX)}
        : {x: PAD + depth.get(name) * (W + GX), y: PAD + row.get(name) * (H + GY)});
    const edges = [], nodes = [];
    for (const st of stages) {
        for (const up of st.after || []) {
            if (!depth.has(up)) continue;
            edges.push(s('path', {class: 'dag-edge', d: edgePath(pos(up), pos(st.name), vertical, w),
                'marker-end': 'url(#dag-arrow)'}, s('title', null, `${up} → ${st.name}`)));
        }
        const p = pos(st.name);
        const run = states.get(st.name);
        const state = run && STATES.has(run.state) ? run.state : (run ? 'unknown' : 'none');
        const g = s('g', {class: `dag-node st-${state}`, transform: `translate(${p.x},${p.y})`,
            tabindex: run && run.instance_id ? '0' : null, role: run && run.instance_id ? 'link' : null,
            'data-stage': st.name, 'data-state': run ? String(run.state) : ''},
        s('title', null, `${st.name} (job ${st.job})${run ? ': ' + run.state : ''}`),
        s('rect', {width: w, height: H, rx: 8, ry: 8}),
        s('text', {x: 10, y: 19, class: 'dag-name'}, clip(st.name, Math.floor((w - 16) / 8.2))),
        s('text', {x: 10, y: 36, class: 'dag-sub'}, clip(run ? `${run.state} · ${st.job}` : st.job,
            Math.floor((w - 16) / 6.4))));
        if (run && run.instance_id && onOpen) {
            g.addEventListener('click', () => onOpen(run.instance_id));
            g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') onOpen(run.instance_id); });
        }
        nodes.push(g);
    }
    return s('svg', {class: 'dag', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
        'aria-label': `Flow DAG of ${stages.length} stages`},
    s('defs', null, s('marker', {id: 'dag-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5,
        markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
    s('path', {d: 'M0,0 L10,5 L0,10 z', class: 'dag-arrowhead'}))), edges, nodes);
}
