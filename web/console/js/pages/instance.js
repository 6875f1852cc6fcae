// instance.js — one instance, updated in place while it runs: the
// SCHEDULED→LOCKED→RUNNING→FINISHED timeline with durations, attempts,
// output, trace id, cancel and retry.
import {h, replace, badge, table, show, timeEl, hashHref, link, dl, fmtDur, toDate, argvText} from '../dom.js';
import {get, post, enc} from '../api.js';
import {actionButton, openByTrace} from '../common.js';

const ORDER = ['SCHEDULED', 'LOCKED', 'RUNNING', 'FINISHED'];

// The API's timeline, or one built from the state timestamps.
function timelineOf(inst) {
    if (Array.isArray(inst.timeline) && inst.timeline.length) return inst.timeline;
    const at = [inst.scheduled_at, inst.locked_at, inst.running_at, inst.finished_at];
    const steps = ORDER.map((state, i) => ({state, at: at[i]})).filter(x => toDate(x.at));
    return steps.map((x, i) => ({...x, duration_ms: i + 1 < steps.length
        ? toDate(steps[i + 1].at) - toDate(x.at) : null}));
}

function timeline(inst) {
    const steps = timelineOf(inst);
    const reached = new Set(steps.map(x => x.state));
    const now = Date.now();
    const bar = h('div', {class: 'tl-bar', 'aria-hidden': 'true'});
    const list = h('ol', {class: 'timeline', 'aria-label': 'State timeline'});
    for (const state of ORDER) {
        const st = steps.find(x => x.state === state);
        const current = st && st.duration_ms === null && state !== 'FINISHED';
        const dur = st ? (st.duration_ms ?? (current ? now - toDate(st.at) : null)) : null;
        const cls = `tl-step ${st ? 'reached' : 'pending'} ${current ? 'current' : ''} s-${state}`;
        list.appendChild(h('li', {class: cls, 'data-state': state},
            h('span', {class: 'tl-name'}, state === 'FINISHED' && inst.outcome ? `FINISHED ${inst.outcome}` : state),
            st ? timeEl(st.at) : h('span', {class: 'muted'}, 'not yet'),
            h('span', {class: 'tl-dur'}, dur === null ? (st ? '' : '') :
                `${fmtDur(dur)}${current ? ' so far' : ''}`)));
        if (st && state !== 'FINISHED') {
            const seg = h('span', {class: `tl-seg s-${state}`, title: `${state} ${fmtDur(dur)}`});
            seg.style.flexGrow = String(Math.max(1, Math.log10(1 + Math.max(0, dur || 0)) * 10));
            bar.appendChild(seg);
        }
    }
    if (!reached.has('FINISHED')) bar.appendChild(h('span', {class: 'tl-seg s-open'}));
    return h('div', null, bar, list);
}

function details(inst) {
    return dl([
        ['Job', inst.job ? link(hashHref('jobs', inst.job), inst.job) : 'inline command'],
        ['Trace id', h('code', {id: 'trace-id'}, show(inst.trace_id))],
        ['Idempotency key', h('code', null, show(inst.idempotency_key))],
        ['Attempt', show(inst.attempt)],
        ['Command', h('code', null, argvText(inst.command))],
        ['Worker', show(inst.worker)],
        ['Priority / group', `P${show(inst.priority)} / ${show(inst.group)}`],
        ['Timeout', fmtDur(inst.timeout_ms)],
        ['Due', timeEl(inst.due_at)],
        ['Exit code', show(inst.exit_code)],
        ['Error', inst.error ? `${show(inst.error_class)}: ${show(inst.error)}` : '—'],
        inst.cancel_requested_at ? ['Cancel requested', timeEl(inst.cancel_requested_at)] : null,
        inst.held_reason ? ['Held', show(inst.held_reason)] : null,
        inst.flow_run_id ? ['Flow run', `${show(inst.flow_run_id)} stage ${show(inst.flow_stage)}`] : null,
        ['Result published', timeEl(inst.result_published_at)],
    ]);
}

function attempts(inst) {
    return table([
        ['Attempt', a => show(a.attempt)],
        ['Outcome', a => badge(a.outcome)],
        ['Worker', a => show(a.worker)],
        ['Exit', a => show(a.exit_code)],
        ['Error', a => (a.error ? `${show(a.error_class)}: ${show(a.error)}` : '—')],
        ['Started', a => timeEl(a.started_at)],
        ['Duration', a => fmtDur(a.duration_ms)],
    ], Array.isArray(inst.attempts) ? inst.attempts : [], {caption: 'Attempts', empty: 'No attempt reported yet.'});
}

function actions(ctx, inst) {
    const id = inst.id;
    if (inst.state !== 'FINISHED') {
        return actionButton(ctx, 'Cancel', async () => {
            const r = await post(`/instances/${enc(id)}/cancel`);
            return `Instance ${id}: ${show(r && r.action)}.`;
        }, {danger: true, confirmText: `Cancel instance ${id}?`, cls: 'cancel'});
    }
    return actionButton(ctx, 'Retry', async () => {
        const r = await post(`/instances/${enc(id)}/retry`);
        if (r && r.instance_id) ctx.navigate(hashHref('instances', r.instance_id));
        else if (r && r.trace_id) await openByTrace(ctx, r.trace_id);
        return `Retry of ${id} submitted${r && r.duplicate ? ' (already retried once)' : ''}.`;
    }, {cls: 'retry'});
}

export async function render(ctx) {
    const id = ctx.params[0];
    const head = h('div', {class: 'page-head'});
    const acts = h('div', {class: 'buttons'});
    const tl = h('section', {class: 'card'}), info = h('section', {class: 'card'});
    const att = h('section', {class: 'card'}), out = h('section', {class: 'card'});
    replace(ctx.main, head, acts, tl, h('div', {class: 'two'}, info, out), att);
    let lastState = null, finishedRounds = 0, skipped = 0;
    await ctx.every(1000, async () => {
        if (finishedRounds > 3 && ++skipped % 5) return;   // finished: refresh every 5 s
        const inst = await get(`/instances/${enc(id)}`);
        if (!ctx.alive()) return;
        replace(head, h('h1', null, 'Instance ', h('span', {class: 'mono'}, `#${show(inst.id)}`)),
            h('span', {id: 'instance-state', 'data-state': show(inst.state),
                'data-outcome': show(inst.outcome)}, badge(inst.state), ' ', inst.outcome ? badge(inst.outcome) : null),
            h('span', {id: 'live', class: 'live'}));
        if (inst.state !== lastState) replace(acts, actions(ctx, inst));
        lastState = inst.state;
        finishedRounds = inst.state === 'FINISHED' ? finishedRounds + 1 : 0;
        replace(tl, h('h2', null, 'Timeline'), timeline(inst));
        replace(info, h('h2', null, 'Details'), details(inst));
        replace(att, attempts(inst));
        replace(out, h('h2', null, 'Output'), inst.output
            ? h('pre', {class: 'output', tabindex: '0', 'aria-label': 'Captured output'}, String(inst.output))
            : h('p', {class: 'muted'}, 'No output captured.'));
    });
}
