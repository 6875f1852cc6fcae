// overview.js — the live overview: finished per minute by outcome, fire
// lateness, lag per lane, backlog age, executors and leader, polled.
// The per-minute figures are computed here from one bounded page of recent
// instances (the API has no aggregate endpoint yet: NEEDS-FROM-API.md).
import {h, replace, badge, table, fmtDur, toDate, show, hashHref, link} from '../dom.js';
import {get, listOf} from '../api.js';
import {barChart, destroyChart} from '../charts.js';

const MINUTES = 30;
const OUTCOMES = [['SUCCESS', '--ok'], ['FAILED', '--bad'], ['TIMEOUT', '--warn'],
    ['CANCELLED', '--muted'], ['other', '--info']];

function minuteKeys(now) {
    const start = Math.floor(now / 60000) - MINUTES + 1;
    return Array.from({length: MINUTES}, (_, i) => (start + i) * 60000);
}

function label(ms) {
    const d = new Date(ms);
    return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

function perMinute(items, now) {
    const keys = minuteKeys(now);
    const idx = new Map(keys.map((k, i) => [k, i]));
    const counts = OUTCOMES.map(() => new Array(keys.length).fill(0));
    const late = keys.map(() => []);
    for (const it of items) {
        const f = toDate(it.finished_at);
        if (f) {
            const i = idx.get(Math.floor(f.getTime() / 60000) * 60000);
            if (i !== undefined) {
                const o = OUTCOMES.findIndex(([n]) => n === it.outcome);
                counts[o < 0 ? OUTCOMES.length - 1 : o][i]++;
            }
        }
        const due = toDate(it.due_at), sent = toDate(it.dispatched_at);
        if (due && sent) {
            const i = idx.get(Math.floor(sent.getTime() / 60000) * 60000);
            if (i !== undefined) late[i].push(Math.max(0, sent - due));
        }
    }
    const q = (arr, p) => (arr.length ? arr.slice().sort((a, b) => a - b)[Math.min(arr.length - 1,
        Math.floor(p * arr.length))] : 0);
    return {labels: keys.map(label), counts,
        p50: late.map(a => q(a, 0.5)), p99: late.map(a => q(a, 0.99))};
}

function card(title, value, detail) {
    return h('section', {class: 'card stat'}, h('h2', null, title),
        h('p', {class: String(value).length > 14 ? 'big long' : 'big'}, value), detail ? h('p', {class: 'muted small'}, detail) : null);
}

function leaderCard(r) {
    if (r.status !== 'fulfilled') return card('Leader', '?', 'unavailable');
    const l = r.value.leader;
    const standbys = Array.isArray(r.value.standbys) ? r.value.standbys.length : 0;
    if (!l) return card('Leader', 'none', `${standbys} standby(s)`);
    return card('Leader', show(l.holder),
        `epoch ${show(l.epoch)} · lease ${fmtDur(l.lease_left_ms)} · ${standbys} standby(s)`);
}

function executorsCard(r) {
    if (r.status !== 'fulfilled') return card('Executors', '?', 'unavailable');
    const items = listOf(r.value).items;
    const lost = items.filter(e => e.lost).length;
    const running = items.reduce((a, e) => a + (Number(e.running) || 0), 0);
    return card('Executors', String(items.length - lost), `${lost} lost · ${running} running now`);
}

function backlogCard(r, now) {
    if (r.status !== 'fulfilled') return card('Backlog', '?', 'unavailable');
    const {items, next} = listOf(r.value);
    const oldest = items.reduce((m, it) => {
        const d = toDate(it.scheduled_at);
        return d && (!m || d < m) ? d : m;
    }, null);
    const n = next ? `${items.length}+` : String(items.length);
    return card('Backlog (SCHEDULED)', n, oldest ? `oldest waits ${fmtDur(now - oldest)}${next ? ' (of the newest ' + items.length + ')' : ''}` : 'empty');
}

function lanesTable(r) {
    if (r.status !== 'fulfilled') return h('p', {class: 'muted'}, 'Lanes unavailable.');
    return table([
        ['Lane', l => `${show(l.lane)} (${show(l.priority)})`],
        ['Lag', l => (l.measured ? show(l.lag) : 'not measured')],
        ['Deferring', l => (l.deferring ? badge('deferring') : 'no')],
        ['Deferred', l => show(l.deferred)],
        ['Oldest deferred wait', l => fmtDur(l.oldest_deferred_wait_ms)],
        ['Measured', l => (l.measured_ago_ms === null || l.measured_ago_ms === undefined ? '—' : fmtDur(l.measured_ago_ms) + ' ago')],
    ], listOf(r.value).items, {caption: 'Lag per lane'});
}

function countersTable(r) {
    if (r.status !== 'fulfilled') return h('p', {class: 'muted'}, 'Counters unavailable.');
    return table([['Counter', x => h('code', null, show(x.name))], ['Value', x => show(x.value)]],
        listOf(r.value).items, {caption: 'Counters', empty: 'No counter yet.'});
}

function execTable(r) {
    if (r.status !== 'fulfilled') return null;
    return table([
        ['Executor', e => show(e.id)],
        ['State', e => badge(e.lost ? 'lost' : e.state)],
        ['Running', e => show(e.running)],
        ['Waiting', e => show(e.waiting)],
        ['Heartbeat', e => fmtDur(e.heartbeat_age_ms) + ' ago'],
    ], listOf(r.value).items.slice(0, 10), {caption: 'Executors', empty: 'No executor has a heartbeat.'});
}

export async function render(ctx) {
    const cards = h('div', {class: 'cards'});
    const finished = h('div', {class: 'chart', id: 'chart-finished'});
    const lateness = h('div', {class: 'chart', id: 'chart-lateness'});
    const note = h('p', {class: 'muted small'});
    const lanes = h('div'), execs = h('div'), counters = h('div');
    replace(ctx.main,
        h('div', {class: 'page-head'}, h('h1', null, 'Overview'), h('span', {id: 'live', class: 'live'}, '')),
        cards,
        h('section', {class: 'card'}, h('h2', null, `Finished per minute by outcome (last ${MINUTES} min)`), finished, note),
        h('section', {class: 'card'}, h('h2', null, 'Fire lateness (dispatched − due), ms'), lateness),
        h('div', {class: 'two'}, h('section', {class: 'card'}, lanes), h('section', {class: 'card'}, execs)),
        h('details', {class: 'card'}, h('summary', null, 'Counters'), counters),
        h('p', null, link('#/instances?state=RUNNING', 'Running instances'), ' · ',
            link(hashHref('instances') + '?outcome=FAILED', 'Failed instances')));
    ctx.onLeave(() => { destroyChart(finished); destroyChart(lateness); });
    await ctx.every(5000, async () => {
        const now = Date.now();
        const since = new Date(now - MINUTES * 60000).toISOString();
        const [done, sched, lanesR, execR, leaderR, countR] = await Promise.allSettled([
            get('/instances', {state: 'FINISHED', since, limit: 500}),
            get('/instances', {state: 'SCHEDULED', limit: 500}),
            get('/lanes'), get('/executors'), get('/leader'), get('/counters')]);
        if (!ctx.alive()) return;
        replace(cards, leaderCard(leaderR), executorsCard(execR), backlogCard(sched, now));
        if (done.status === 'fulfilled') {
            const {items, next} = listOf(done.value);
            const m = perMinute(items, now);
            barChart(finished, {title: 'finished per minute', labels: m.labels, stacked: true,
                series: OUTCOMES.map(([n, c], i) => ({name: n, color: c, data: m.counts[i]}))});
            barChart(lateness, {title: 'fire lateness', labels: m.labels, unit: 'ms',
                series: [{name: 'p50', color: '--info', data: m.p50}, {name: 'p99', color: '--warn', data: m.p99}]});
            note.textContent = next ? `From the newest ${items.length} instances scheduled in the window.` :
                `${items.length} instances finished in the window.`;
        } else {
            replace(finished, h('p', {class: 'error'}, ctx.errorText(done.reason)));
        }
        replace(lanes, lanesTable(lanesR));
        replace(execs, execTable(execR));
        replace(counters, countersTable(countR));
        if ([done, sched, lanesR, execR, leaderR].every(r => r.status === 'rejected')) throw done.reason;
    });
}
