// instances.js — instances with filters (job, state, outcome, time range,
// trace id) and keyset paging; the first page refreshes itself.
import {h, replace, toDate} from '../dom.js';
import {get, listOf} from '../api.js';
import {pager, field, select, filterForm} from '../common.js';
import {runsTable} from './job.js';

const STATES = ['', 'SCHEDULED', 'LOCKED', 'RUNNING', 'FINISHED'];
const OUTCOMES = ['', 'SUCCESS', 'FAILED', 'TIMEOUT', 'CANCELLED'];

// datetime-local (local time, no zone) <-> ISO-8601 UTC in the query.
function toLocalInput(iso) {
    const d = toDate(iso);
    if (!d) return '';
    const off = d.getTimezoneOffset() * 60000;
    return new Date(d.getTime() - off).toISOString().slice(0, 16);
}
function fromLocalInput(v) {
    const d = v ? new Date(v) : null;
    return d && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
}

function filters(ctx) {
    const q = ctx.query;
    const text = key => h('input', {type: 'search', value: q.get(key) || '', autocomplete: 'off'});
    const job = text('job'), trace = text('trace_id');
    const state = select(STATES.map(s => [s, s || 'any']), q.get('state') || '');
    const outcome = select(OUTCOMES.map(s => [s, s || 'any']), q.get('outcome') || '');
    const since = h('input', {type: 'datetime-local', value: toLocalInput(q.get('since'))});
    const until = h('input', {type: 'datetime-local', value: toLocalInput(q.get('until'))});
    return filterForm(ctx, [
        {key: 'job', el: field('f-job', 'Job', job), value: () => job.value.trim()},
        {key: 'state', el: field('f-state', 'State', state), value: () => state.value},
        {key: 'outcome', el: field('f-outcome', 'Outcome', outcome), value: () => outcome.value},
        {key: 'since', el: field('f-since', 'Scheduled from', since), value: () => fromLocalInput(since.value)},
        {key: 'until', el: field('f-until', 'Scheduled before', until), value: () => fromLocalInput(until.value)},
        {key: 'trace_id', el: field('f-trace', 'Trace id', trace), value: () => trace.value.trim()},
    ]);
}

export async function render(ctx) {
    const q = ctx.query;
    const query = {limit: 50};
    for (const k of ['cursor', 'job', 'state', 'outcome', 'since', 'until', 'trace_id', 'group', 'priority']) {
        if (q.get(k)) query[k] = q.get(k);
    }
    const list = h('div', {id: 'instance-list'}), pages = h('div');
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Instances'), h('span', {id: 'live', class: 'live'})),
        filters(ctx), list, pages);
    const load = async () => {
        const {items, next} = listOf(await get('/instances', query));
        if (!ctx.alive()) return;
        replace(list, runsTable(items, q.get('cursor') ? 'Instances (older page)' : 'Instances (newest first)'));
        replace(pages, pager(ctx, '#/instances', next));
    };
    if (query.cursor) await load();
    else await ctx.every(4000, load);
}
