// dlq.js — the dead-letter topic, newest first (with the job, instance and
// trace id a record names): filter by reason, show a record (headers,
// bytes), replay it (idempotent on the API side).
import {h, replace, badge, table, show, timeEl, hashHref, link, dl} from '../dom.js';
import {get, post, enc, listOf} from '../api.js';
import {actionButton, field, filterForm} from '../common.js';

// The record's bytes: as text when printable UTF-8, else as hex.
function bytesView(b64) {
    if (typeof b64 !== 'string') return h('p', {class: 'muted'}, 'No bytes.');
    let bytes;
    try { bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0)); } catch (_) {
        return h('p', {class: 'error'}, 'Not base64.');
    }
    const shown = bytes.slice(0, 4096);
    let text = null;
    try { text = new TextDecoder('utf-8', {fatal: true}).decode(shown); } catch (_) { /* binary */ }
    const printable = text !== null && !/[\u0000-\u0008\u000e-\u001f]/.test(text);
    const body = printable ? text : Array.from(shown, x => x.toString(16).padStart(2, '0')).join(' ');
    return h('div', null, h('p', {class: 'muted small'},
        `${bytes.length} bytes${bytes.length > shown.length ? ', first 4096 shown' : ''}, as ${printable ? 'text' : 'hex'}`),
    h('pre', {class: 'output', tabindex: '0'}, body));
}

// A trace id links to the instances that carry it.
function traceLink(t) {
    return t ? link(`#/instances?trace_id=${enc(t)}`, t) : '—';
}

function replayButton(ctx, id, result) {
    return actionButton(ctx, 'Replay', async () => {
        const r = await post(`/dlq/${enc(id)}/replay`);
        replace(result, h('p', {class: 'replay-result', 'data-action': show(r && r.action)},
            `Record ${show(r.id)}: ${show(r.action)} to ${show(r.topic)}`,
            r.instance_id ? [' · ', link(hashHref('instances', r.instance_id), `instance #${r.instance_id}`)] : null,
            r.trace_id ? [' · ', link(`#/instances?trace_id=${enc(r.trace_id)}`, `trace ${r.trace_id}`)] : null));
        return `Replayed ${id}: ${show(r && r.action)}.`;
    }, {cls: 'replay', confirmText: `Replay DLQ record ${id}?`});
}

async function shown(ctx, id) {
    const e = await get(`/dlq/${enc(id)}`);
    const result = h('div', {id: 'replay-result', role: 'status'});
    const headers = e.headers && typeof e.headers === 'object' ? Object.entries(e.headers) : [];
    return h('section', {class: 'card', id: 'dlq-entry'},
        h('div', {class: 'page-head'}, h('h2', null, `Record ${show(e.id)}`),
            h('div', {class: 'buttons'}, replayButton(ctx, e.id ?? id, result),
                h('a', {href: '#/dlq', class: 'button'}, 'Close'))),
        result,
        dl([['Kind', badge(e.kind)], ['Time', timeEl(e.time)], ['Source', show(e.source)],
            ['Reason', show(e.reason)], ['Job', e.job ? link(hashHref('jobs', e.job), e.job) : '—'],
            ['Instance', e.instance_id ? link(hashHref('instances', e.instance_id), `#${e.instance_id}`) : '—'],
            ['Trace id', traceLink(e.trace_id)]]),
        h('h3', null, 'Headers'),
        table([['Header', ([k]) => h('code', null, k)], ['Value', ([, v]) => show(v)]], headers, {empty: 'No headers.'}),
        h('h3', null, 'Value'), bytesView(e.value_base64));
}

export async function render(ctx) {
    const q = ctx.query;
    const reason = h('input', {type: 'search', value: q.get('reason') || '', autocomplete: 'off'});
    const form = filterForm(ctx, [{key: 'reason', el: field('f-reason', 'Reason contains', reason),
        value: () => reason.value.trim()}]);
    const {items} = listOf(await get('/dlq', {limit: 100, reason: q.get('reason')}));
    const detail = q.get('show') ? await shown(ctx, q.get('show')).catch(e =>
        h('p', {class: 'error'}, ctx.errorText(e))) : null;
    const base = q.get('reason') ? `#/dlq?reason=${enc(q.get('reason'))}&` : '#/dlq?';
    replace(ctx.main, h('h1', null, 'Dead letters'), detail, form,
        table([
            ['Record', e => link(`${base}show=${enc(e.id)}`, e.id)],
            ['Time', e => timeEl(e.time)],
            ['Kind', e => badge(e.kind)],
            ['Source', e => show(e.source)],
            ['Reason', e => show(e.reason)],
            ['Job', e => (e.job ? link(hashHref('jobs', e.job), e.job) : '—')],
            ['Instance', e => (e.instance_id ? link(hashHref('instances', e.instance_id), `#${e.instance_id}`) : '—')],
            ['Trace id', e => traceLink(e.trace_id)],
        ], items, {caption: 'Newest first (at most 100)', empty: 'The dead-letter topic is empty.'}));
    if (detail) detail.scrollIntoView({block: 'start'});
}
