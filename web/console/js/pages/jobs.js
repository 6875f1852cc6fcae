// jobs.js — the jobs list (filters, keyset paging), create form, pause-all
// and resume-all.
import {h, replace, badge, table, show, timeEl, hashHref, link, argvText} from '../dom.js';
import {get, post, listOf} from '../api.js';
import {pager, scheduleText, actionButton, field, select, filterForm} from '../common.js';

function filters(ctx) {
    const prefix = h('input', {type: 'search', value: ctx.query.get('prefix') || ''});
    const enabled = select([['', 'any'], ['true', 'enabled'], ['false', 'disabled']], ctx.query.get('enabled') || '');
    return filterForm(ctx, [
        {key: 'prefix', el: field('f-prefix', 'Name starts with', prefix), value: () => prefix.value.trim()},
        {key: 'enabled', el: field('f-enabled', 'Enabled', enabled), value: () => enabled.value},
    ]);
}

function scheduleSpec(kind, expr, tz) {
    switch (kind) {
    case 'cron': return {kind, expr, time_zone: tz || 'UTC'};
    case 'fixed_rate': case 'fixed_delay': return {kind, interval_ms: Number(expr)};
    case 'once': return /^[0-9]+$/.test(expr) ? {kind, after_ms: Number(expr)} : {kind, at: expr};
    default: return {kind: 'none'};
    }
}

function createForm(ctx) {
    const name = h('input', {required: true, pattern: '[A-Za-z0-9][A-Za-z0-9._\\-]{0,127}', autocomplete: 'off'});
    const command = h('textarea', {rows: 3, required: true, spellcheck: 'false',
        placeholder: '/bin/echo\nhello'});
    const kind = select([['none', 'none (run by hand)'], ['cron', 'cron'], ['fixed_rate', 'fixed rate (ms)'],
        ['fixed_delay', 'fixed delay (ms)'], ['once', 'once (time, or ms from now)']], 'none');
    const expr = h('input', {autocomplete: 'off', placeholder: '0 */5 * * * *'});
    const tz = h('input', {autocomplete: 'off', placeholder: 'UTC'});
    const timeout = h('input', {type: 'number', min: 1, placeholder: '3600000'});
    const retries = h('input', {type: 'number', min: 0, placeholder: '3'});
    const msg = h('p', {class: 'error', role: 'alert'});
    const submit = h('button', {type: 'submit', class: 'primary', disabled: !ctx.isAdmin()}, 'Create job');
    const form = h('form', {class: 'grid-form', id: 'create-job'},
        field('j-name', 'Name', name), field('j-command', 'Command (one argument per line)', command),
        field('j-kind', 'Schedule', kind), field('j-expr', 'Expression / interval / time', expr),
        field('j-tz', 'Time zone (cron)', tz), field('j-timeout', 'Timeout (ms)', timeout),
        field('j-retries', 'Retries', retries), h('div', {class: 'field actions'}, submit), msg);
    form.addEventListener('submit', async ev => {
        ev.preventDefault();
        msg.textContent = '';
        const spec = {name: name.value.trim(), handler: 'command',
            command: command.value.split('\n').map(x => x.replace(/\r$/, '')).filter(x => x !== ''),
            schedule: scheduleSpec(kind.value, expr.value.trim(), tz.value.trim())};
        if (timeout.value) spec.timeout_ms = Number(timeout.value);
        if (retries.value) spec.retry = {max: Number(retries.value)};
        submit.disabled = true;
        try {
            const job = await post('/jobs', spec);
            ctx.flash(`Job ${show(job && job.name)} created.`);
            ctx.navigate(hashHref('jobs', job.name || spec.name));
        } catch (e) {
            msg.textContent = ctx.errorText(e);
        } finally {
            submit.disabled = !ctx.isAdmin();
        }
    });
    return h('details', {class: 'card', open: ctx.query.get('new') === '1' ? true : null},
        h('summary', null, 'Create a job'), form);
}

export async function render(ctx) {
    const q = ctx.query;
    const res = await get('/jobs', {limit: 50, cursor: q.get('cursor'), prefix: q.get('prefix'),
        enabled: q.get('enabled')});
    const {items, next} = listOf(res);
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Jobs'),
            h('div', {class: 'buttons'},
                actionButton(ctx, 'Pause all', async () => {
                    const r = await post('/jobs/pause-all');
                    ctx.reload();
                    return `Paused ${(r && r.paused ? r.paused.length : 0)} job(s).`;
                }, {confirmText: 'Disable every enabled job?'}),
                actionButton(ctx, 'Resume all', async () => {
                    const r = await post('/jobs/resume-all');
                    ctx.reload();
                    return `Resumed ${(r && r.resumed ? r.resumed.length : 0)} job(s).`;
                }))),
        createForm(ctx), filters(ctx),
        table([
            ['Name', j => link(hashHref('jobs', j.name), j.name)],
            ['Enabled', j => badge(j.enabled ? 'enabled' : 'disabled')],
            ['Schedule', j => scheduleText(j.schedule)],
            ['Command', j => h('code', null, argvText(j.command))],
            ['Last fire', j => (j.last_fire ? h('span', null, timeEl(j.last_fire.nominal_time), ' ',
                badge(j.last_fire.decision)) : '—')],
            ['Circuit', j => badge(j.circuit && j.circuit.state)],
        ], items, {caption: `Jobs${q.get('cursor') ? ' (later page)' : ''}`, empty: 'No jobs.'}),
        pager(ctx, '#/jobs', next));
}
