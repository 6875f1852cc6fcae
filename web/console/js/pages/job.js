// job.js — one job: its definition and schedule, the next fires (DST
// marked), the decision history, recent runs (polled) and actions.
import {h, replace, badge, table, show, timeEl, hashHref, link, dl, fmtDur, argvText} from '../dom.js';
import {get, post, del, enc, listOf, request, ApiError} from '../api.js';
import {scheduleText, actionButton, openByTrace} from '../common.js';

function actions(ctx, job) {
    const path = `/jobs/${enc(job.name)}`;
    return h('div', {class: 'buttons'},
        job.enabled
            ? actionButton(ctx, 'Disable', async () => { await post(`${path}/disable`); ctx.reload(); return `Disabled ${job.name}.`; })
            : actionButton(ctx, 'Enable', async () => { await post(`${path}/enable`); ctx.reload(); return `Enabled ${job.name}.`; }),
        actionButton(ctx, 'Run now', async () => {
            const r = await post('/instances', {job: job.name});
            await openByTrace(ctx, r.trace_id);
            return `Submitted ${job.name} (trace ${show(r.trace_id)}).`;
        }, {cls: 'primary', admin: true}),
        job.circuit && job.circuit.state !== 'closed'
            ? actionButton(ctx, 'Reset circuit', async () => { await post(`${path}/circuit/reset`); ctx.reload(); return 'Circuit reset.'; })
            : null,
        actionButton(ctx, 'Delete', async () => {
            let r;
            try {
                r = await del(path);
            } catch (e) {
                // 409: unfinished instances; deleting cancels them only when asked
                if (!(e instanceof ApiError && e.status === 409) ||
                    !window.confirm(`${e.message}\n\nCancel its unfinished instances and delete it?`)) throw e;
                r = await request('DELETE', path, null, {cancel_pending: 'true'});
            }
            ctx.navigate('#/jobs');
            const n = r && Array.isArray(r.cancelled) ? r.cancelled.length : 0;
            return `Deleted ${job.name}${n ? `, cancelled ${n} instance(s)` : ''}.`;
        }, {danger: true, confirmText: `Delete job ${job.name}?`}));
}

function definition(job) {
    const r = job.retry || {}, c = job.circuit || {};
    return dl([
        ['Schedule', scheduleText(job.schedule)],
        job.schedule && job.schedule.kind === 'cron' ? ['DST', `gap ${show(job.schedule.dst_gap)}, overlap ${show(job.schedule.dst_overlap)}`] : null,
        ['Handler', show(job.handler)],
        ['Command', h('code', null, argvText(job.command))],
        ['Enabled', badge(job.enabled ? 'enabled' : 'disabled')],
        ['Group / priority', `${show(job.group)} / P${show(job.priority)}`],
        ['Timeout', fmtDur(job.timeout_ms)],
        ['Retries', `${show(r.max)} (initial ${fmtDur(r.initial_ms)}, ×${show(r.multiplier)}, max ${fmtDur(r.max_delay_ms)})`],
        ['Circuit', h('span', null, badge(c.state), ` ${show(c.consecutive_failures)}/${show(c.threshold)} failures`)],
        ['Misfire / overlap', `${show(job.misfire)} / ${show(job.overlap)}`],
        ['Concurrency', job.concurrency ? String(job.concurrency) : 'no limit'],
        ['Running now', show(job.running)],
        ['Version', show(job.version)],
        ['Updated', timeEl(job.updated_at)],
    ]);
}

// "2027-03-28T03:30:00+02:00" -> "Sun 2027-03-28 03:30:00 +02:00" (the
// zone's wall clock as the API gives it).
const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
function fireText(t) {
    const m = /^(\d{4})-(\d{2})-(\d{2})T([0-9:.]+)(Z|[+-]\d{2}:?\d{2})?$/.exec(String(t ?? ''));
    if (!m) return show(t);
    const day = DAYS[new Date(Date.UTC(+m[1], +m[2] - 1, +m[3])).getUTCDay()];
    return `${day} ${m[1]}-${m[2]}-${m[3]} ${m[4]}${m[5] ? ' ' + (m[5] === 'Z' ? 'UTC' : m[5]) : ''}`;
}

function fires(list) {
    const items = Array.isArray(list) ? list : [];
    if (!items.length) return h('p', {class: 'muted'}, 'No upcoming fire.');
    return h('ol', {class: 'fires'}, items.map(f => h('li', null,
        h('time', {datetime: show(f.time), title: show(f.time)}, fireText(f.time)),
        f.dst ? h('span', {class: 'badge b-dst', title: f.dst === 'shifted'
            ? 'moved out of a spring-forward gap' : 'in the repeated hour of a fall-back overlap'},
        `DST ${f.dst}`) : null)));
}

function history(items) {
    return table([
        ['Nominal time', d => timeEl(d.nominal_time)],
        ['Decision', d => badge(d.decision)],
        ['Instance', d => (d.instance_id ? link(hashHref('instances', d.instance_id), `#${d.instance_id}`) : '—')],
        ['State', d => (d.instance_outcome ? badge(d.instance_outcome) : badge(d.instance_state))],
        ['Detail', d => show(d.detail)],
    ], items, {caption: 'Decisions (newest first)', empty: 'No fire decided yet.'});
}

export function runsTable(items, caption = 'Recent runs') {
    return table([
        ['Instance', i => link(hashHref('instances', i.id), `#${i.id}`)],
        ['State', i => badge(i.state)],
        ['Outcome', i => (i.outcome ? badge(i.outcome) : '—')],
        ['Attempt', i => show(i.attempt)],
        ['Scheduled', i => timeEl(i.scheduled_at)],
        ['Finished', i => timeEl(i.finished_at)],
        ['Exit', i => show(i.exit_code)],
    ], items, {caption, empty: 'No runs.'});
}

export async function render(ctx) {
    const name = ctx.params[0];
    const job = await get(`/jobs/${enc(name)}`);
    const runs = h('div'), hist = h('div');
    const nextBox = h('div', null, fires(job.next_fires));
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Job ', h('span', {class: 'mono'}, show(job.name))),
            h('span', {id: 'live', class: 'live'})),
        actions(ctx, job),
        h('div', {class: 'two'},
            h('section', {class: 'card'}, h('h2', null, 'Definition'), definition(job)),
            h('section', {class: 'card'}, h('h2', null, 'Next fires'), nextBox)),
        h('section', {class: 'card'}, runs,
            h('p', null, link(`#/instances?job=${enc(job.name)}`, 'All instances of this job'))),
        h('section', {class: 'card'}, hist));
    get(`/jobs/${enc(name)}/next`, {n: 10}).then(r => {
        if (ctx.alive() && r && Array.isArray(r.fires)) {
            replace(nextBox, h('p', {class: 'muted small'}, `In ${show(r.time_zone)}:`), fires(r.fires));
        }
    }).catch(() => {});
    await ctx.every(3000, async () => {
        const [r, d] = await Promise.all([
            get('/instances', {job: name, limit: 10}),
            get(`/jobs/${enc(name)}/history`, {limit: 20}).catch(e => ({error: e}))]);
        if (!ctx.alive()) return;
        replace(runs, runsTable(listOf(r).items));
        replace(hist, d.error ? h('p', {class: 'muted'}, `History: ${ctx.errorText(d.error)}`) : history(listOf(d).items));
    });
}
