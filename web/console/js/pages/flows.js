// flows.js — the flows list: stages, failure policy, last run.
import {h, replace, badge, table, show, hashHref, link} from '../dom.js';
import {get, listOf} from '../api.js';
import {pager} from '../common.js';

export async function render(ctx) {
    const {items, next} = listOf(await get('/flows', {limit: 50, cursor: ctx.query.get('cursor')}));
    replace(ctx.main, h('h1', null, 'Flows'),
        table([
            ['Name', f => link(hashHref('flows', f.name), f.name)],
            ['Stages', f => String(Array.isArray(f.stages) ? f.stages.length : 0)],
            ['On failure', f => show(f.on_failure)],
            ['Schedule job', f => (f.schedule_job ? link(hashHref('jobs', f.schedule_job), f.schedule_job) : 'by hand')],
            ['Last run', f => (f.last_run ? h('span', null, `#${show(f.last_run.id)} `, badge(f.last_run.state)) : '—')],
        ], items, {caption: 'Flows', empty: 'No flows (axctl flow create, or POST /api/v1/flows).'}),
        pager(ctx, '#/flows', next));
}
