// executors.js — executors with their load and pools, polled.
import {h, replace, badge, table, show, fmtDur} from '../dom.js';
import {get, listOf} from '../api.js';

function pools(e) {
    const ps = Array.isArray(e.pools) ? e.pools : [];
    if (!ps.length) return '—';
    return h('ul', {class: 'plain'}, ps.map(p => h('li', null,
        `${show(p.name)}: ${show(p.running)}/${show(p.slots)} busy, ${show(p.waiting)} waiting`)));
}

function pct(v) { return v === null || v === undefined ? '—' : `${Number(v).toFixed(0)} %`; }

export async function render(ctx) {
    const all = ctx.query.get('all') === 'true';
    const box = h('div');
    const toggle = h('input', {type: 'checkbox', id: 'ex-all', checked: all ? true : null});
    toggle.addEventListener('change', () => ctx.navigate(toggle.checked ? '#/executors?all=true' : '#/executors'));
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Executors'), h('span', {id: 'live', class: 'live'})),
        h('p', null, toggle, ' ', h('label', {for: 'ex-all'}, 'Include those silent for over a minute')),
        box);
    await ctx.every(3000, async () => {
        const {items} = listOf(await get('/executors', {limit: 100, all: all ? 'true' : null}));
        if (!ctx.alive()) return;
        replace(box, table([
            ['Executor', e => h('span', {class: 'mono'}, show(e.id))],
            ['State', e => badge(e.lost ? 'lost' : e.state)],
            ['Heartbeat', e => `${fmtDur(e.heartbeat_age_ms)} ago`],
            ['Groups', e => show(e.groups)],
            ['Running', e => show(e.running)],
            ['Waiting', e => show(e.waiting)],
            ['CPU', e => pct(e.cpu_pct)],
            ['Memory', e => pct(e.mem_pct)],
            ['Pools', pools],
        ], items, {caption: 'Executors (latest heartbeat first)', empty: 'No executor has a heartbeat.'}));
    });
}
