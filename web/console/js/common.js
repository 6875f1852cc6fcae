// common.js — pieces several pages share: keyset pager, schedule text,
// action buttons, form fields.
import {h, show, fmtDur} from './dom.js';

// Keyset paging: the cursor is in the page's hash query; the cursors of the
// pages before are kept in memory (per list) so "Newer" can go back.
const stacks = new Map();

export function pager(ctx, listKey, nextCursor) {
    const q = new URLSearchParams(ctx.query);
    const cur = q.get('cursor');
    const stack = stacks.get(listKey) || [];
    const go = cursor => {
        const n = new URLSearchParams(q);
        if (cursor) n.set('cursor', cursor); else n.delete('cursor');
        const base = location.hash.replace(/\?.*$/, '');
        ctx.navigate(n.toString() ? `${base}?${n}` : base);
    };
    const first = h('button', {type: 'button', disabled: !cur, on: {click: () => {
        stacks.set(listKey, []); go(null); }}}, 'First page');
    const newer = h('button', {type: 'button', disabled: !cur || !stack.length, on: {click: () => {
        const prev = stack.pop(); stacks.set(listKey, stack); go(prev || null); }}}, '← Newer');
    const older = h('button', {type: 'button', disabled: !nextCursor, class: 'next-page', on: {click: () => {
        stack.push(cur || ''); stacks.set(listKey, stack); go(nextCursor); }}}, 'Older →');
    return h('nav', {class: 'pager', 'aria-label': 'Pages of the list'}, first, newer, older);
}

export function resetPager(listKey) { stacks.delete(listKey); }

export function scheduleText(sch) {
    if (!sch || !sch.kind || sch.kind === 'none') return 'no schedule (runs by hand)';
    switch (sch.kind) {
    case 'cron': return `cron ${show(sch.expr)} (${show(sch.time_zone || 'UTC')})`;
    case 'fixed_rate': return `every ${fmtDur(sch.interval_ms)} (fixed rate)`;
    case 'fixed_delay': return `${fmtDur(sch.interval_ms)} after each run (fixed delay)`;
    case 'once': return `once${sch.expr ? ' at ' + sch.expr : sch.start_at ? ' at ' + sch.start_at : ''}`;
    default: return `${show(sch.kind)} ${show(sch.expr)}`;
    }
}

// A button running an async action: disabled while it runs, the result or
// error flashed; admin-only buttons are disabled for a read token.
export function actionButton(ctx, text, fn, {danger = false, confirmText = null, admin = true, cls = ''} = {}) {
    const b = h('button', {type: 'button', class: `${danger ? 'danger' : ''} ${cls}`.trim(),
        disabled: admin && !ctx.isAdmin(), title: admin && !ctx.isAdmin() ? 'needs an admin token' : null});
    b.textContent = text;
    b.addEventListener('click', async () => {
        if (confirmText && !window.confirm(confirmText)) return;
        b.disabled = true;
        try {
            const msg = await fn();
            if (msg) ctx.flash(msg);
        } catch (e) {
            ctx.flash(ctx.errorText(e), 'error');
        } finally {
            if (b.isConnected) b.disabled = false;
        }
    });
    return b;
}

// A labelled form field; kind 'select' takes options [[value, text]].
export function field(id, labelText, input, help) {
    input.id = id;
    if (!input.name) input.name = id;
    return h('div', {class: 'field'}, h('label', {for: id}, labelText), input,
        help ? h('small', {class: 'muted', id: `${id}-help`}, help) : null);
}

export function select(options, value) {
    const el = h('select', null, options.map(([v, t]) => h('option', {value: v}, t)));
    if (value !== undefined && value !== null) el.value = value;
    return el;
}

// The filter form of a list: fields -> hash query on submit.
export function filterForm(ctx, fields, extra) {
    const form = h('form', {class: 'filters', role: 'search'}, fields.map(f => f.el),
        h('div', {class: 'field actions'}, h('button', {type: 'submit', class: 'primary'}, 'Apply'),
            h('button', {type: 'reset'}, 'Clear')), extra || null);
    const base = location.hash.replace(/\?.*$/, '');
    form.addEventListener('submit', ev => {
        ev.preventDefault();
        const q = new URLSearchParams();
        for (const f of fields) {
            const v = f.value();
            if (v) q.set(f.key, v);
        }
        resetPager(base);
        ctx.navigate(q.toString() ? `${base}?${q}` : base);
    });
    form.addEventListener('reset', () => { resetPager(base); setTimeout(() => ctx.navigate(base), 0); });
    return form;
}

// After a submission (202 with a trace id) the instance appears once
// ax-trigger ingests it: poll ?trace_id= for a while, then open it.
export async function openByTrace(ctx, traceId, tries = 120) {
    const {get, listOf} = await import('./api.js');
    for (let i = 0; i < tries && ctx.alive(); i++) {
        const {items} = listOf(await get('/instances', {trace_id: traceId, limit: 1}));
        if (items.length) {
            ctx.navigate(`#/instances/${encodeURIComponent(items[0].id)}`);
            return;
        }
        await new Promise(r => setTimeout(r, 500));
    }
    if (ctx.alive()) ctx.navigate(`#/instances?trace_id=${encodeURIComponent(traceId)}`);
}
