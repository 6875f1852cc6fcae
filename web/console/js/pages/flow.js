// flow.js — one flow drawn as its DAG, coloured by the stage states of the
// chosen run (the newest by default), polled; its runs and a Run button.
import {h, replace, badge, table, show, timeEl, hashHref, link} from '../dom.js';
import {get, post, enc, listOf} from '../api.js';
import {actionButton} from '../common.js';
import {drawDag, dagWidth} from '../dag.js';

function runsTable(ctx, name, runs, chosen) {
    return table([
        ['Run', r => link(`${hashHref('flows', name)}?run=${enc(r.id)}`, `#${r.id}`)],
        ['State', r => badge(r.state)],
        ['Started by', r => show(r.started_by)],
        ['Started', r => timeEl(r.started_at)],
        ['Finished', r => timeEl(r.finished_at)],
        ['Shown', r => (String(r.id) === String(chosen) ? 'yes' : '')],
    ], runs, {caption: 'Runs (newest first)', empty: 'Never run.'});
}

export async function render(ctx) {
    const name = ctx.params[0];
    const flow = await get(`/flows/${enc(name)}`);
    const stages = Array.isArray(flow.stages) ? flow.stages : [];
    const dagBox = h('div', {class: 'dag-wrap', id: 'dag'}), runsBox = h('div'), runHead = h('p', {class: 'muted'});
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Flow ', h('span', {class: 'mono'}, show(flow.name))),
            h('span', {id: 'live', class: 'live'})),
        h('div', {class: 'buttons'}, actionButton(ctx, 'Run now', async () => {
            const r = await post(`/flows/${enc(name)}/runs`);
            ctx.navigate(`${hashHref('flows', name)}?run=${enc(r.run_id)}`);
            return `Started run ${show(r.run_id)}.`;
        }, {cls: 'primary'})),
        h('p', null, `On failure: ${show(flow.on_failure)} · `, flow.schedule_job
            ? link(hashHref('jobs', flow.schedule_job), `schedule ${flow.schedule_job}`) : 'no schedule'),
        h('section', {class: 'card'}, h('h2', null, 'Stages'), runHead, dagBox,
            h('ul', {class: 'legend'}, ['pending', 'running', 'succeeded', 'failed', 'skipped'].map(st =>
                h('li', null, h('span', {class: `swatch st-${st}`}), st)))),
        h('section', {class: 'card'}, runsBox));
    await ctx.every(2000, async () => {
        const runs = listOf(await get(`/flows/${enc(name)}/runs`, {limit: 10})).items;
        if (!ctx.alive()) return;
        const chosen = ctx.query.get('run') || (runs[0] && runs[0].id);
        let run = runs.find(r => String(r.id) === String(chosen));
        if (!run && chosen) run = await get(`/flows/${enc(name)}/runs/${enc(chosen)}`).catch(() => null);
        const states = new Map((run && Array.isArray(run.stages) ? run.stages : []).map(x => [x.stage, x]));
        runHead.textContent = run ? `Run #${run.id}: ${run.state} (started by ${show(run.started_by)})` : 'No run yet: the stages as defined.';
        const vertical = dagBox.clientWidth > 0 && dagBox.clientWidth < dagWidth(stages);
        replace(dagBox, drawDag(stages, states, id => ctx.navigate(hashHref('instances', id)), vertical));
        replace(runsBox, runsTable(ctx, name, runs, run && run.id));
    });
}
