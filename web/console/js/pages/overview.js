// overview.js — the live overview: finished per minute by outcome, fire
// lateness, lag per lane, backlog age, executors and leader, polled.
// The per-minute figures and the backlog come from GET /api/v1/stats (one
// bounded store statement over the window), not from pages of instances.
import {h, replace, badge, table, fmtDur, toDate, show, hashHref, link} from '../dom.js';
import {get, listOf} from '../api.js';
import {barChart, destroyChart} from '../charts.js';

const MINUTES = 30;
const OUTCOMES = [['SUCCESS', '--ok'], ['FAILED', '--bad'], ['TIMEOUT', '--warn'],
    ['CANCELLED', '--muted'], ['other', '--info']];

function label(iso) {
    const d = toDate(iso);
    return d ? `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}` : '?';
}

function perMinute(stats) {
    const minutes = Array.isArray(stats.minutes) ? stats.minutes : [];
    const known = OUTCOMES.slice(0, -1).map(([n]) => n);
    const counts = OUTCOMES.map(([n]) => minutes.map(m => {
        const f = m.finished || {};
        if (n !== 'other') return Number(f[n]) || 0;
        return Object.keys(f).filter(k => !known.includes(k)).reduce((a, k) => a + (Number(f[k]) || 0), 0);
    }));
    return {labels: minutes.map(m => label(m.minute)), counts,
        p50: minutes.map(m => Number(m.lateness_p50_ms) || 0),
        p99: minutes.map(m => Number(m.lateness_p99_ms) || 0)};
}

function card(title, value, detail) {
    return h('section', {class: 'card stat'}, h('h2', null, title),
        h('p', {class: String(value).length > 14 ? 'big long' : 'big'}, value), detail ? h('p', {class: 'muted small'}, detail) : null);
}

// The standby triggers (their heartbeats), each named, a silent one marked lost.
function standbysLine(list) {
    if (!list.length) return h('p', {class: 'muted small', id: 'standbys'}, 'no standby');
    return h('p', {class: 'muted small', id: 'standbys'}, `${list.length} standby(s): `,
        list.map((s, i) => [i ? ', ' : '', h('code', null, show(s.holder)),
            s.lost ? [' ', badge('lost')] : ` (${fmtDur(s.age_ms)} ago)`]));
}

function leaderCard(r) {
    if (r.status !== 'fulfilled') return card('Leader', '?', 'unavailable');
    const l = r.value.leader;
    const standbys = Array.isArray(r.value.standbys) ? r.value.standbys : [];
    const c = l ? card('Leader', show(l.holder), `epoch ${show(l.epoch)} · lease ${fmtDur(l.lease_left_ms)}`)
        : card('Leader', 'none', null);
    c.append(standbysLine(standbys));
    return c;
}

function executorsCard(r) {
    if (r.status !== 'fulfilled') return card('Executors', '?', 'unavailable');
    const items = listOf(r.value).items;
    const lost = items.filter(e => e.lost).length;
    const running = items.reduce((a, e) => a + (Number(e.running) || 0), 0);
    return card('Executors', String(items.length - lost), `${lost} lost · ${running} running now`);
}

function backlogCard(r) {
    if (r.status !== 'fulfilled') return card('Backlog', '?', 'unavailable');
    const b = r.value.backlog || {};
    const n = Number(b.count) || 0;
    return card('Backlog (SCHEDULED)', String(n),
        n && b.oldest_age_ms !== null && b.oldest_age_ms !== undefined ? `oldest waits ${fmtDur(b.oldest_age_ms)}` : 'empty');
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
        const [stats, lanesR, execR, leaderR, countR] = await Promise.allSettled([
            get('/stats', {minutes: MINUTES}),
            get('/lanes'), get('/executors'), get('/leader'), get('/counters')]);
        if (!ctx.alive()) return;
        replace(cards, leaderCard(leaderR), executorsCard(execR), backlogCard(stats));
        if (stats.status === 'fulfilled') {
            const m = perMinute(stats.value);
            barChart(finished, {title: 'finished per minute', labels: m.labels, stacked: true,
                series: OUTCOMES.map(([n, c], i) => ({name: n, color: c, data: m.counts[i]}))});
            barChart(lateness, {title: 'fire lateness', labels: m.labels, unit: 'ms',
                series: [{name: 'p50', color: '--info', data: m.p50}, {name: 'p99', color: '--warn', data: m.p99}]});
            const total = m.counts.reduce((a, row) => a + row.reduce((x, y) => x + y, 0), 0);
            note.textContent = `${total} instances finished in the window.`;
        } else {
            replace(finished, h('p', {class: 'error'}, ctx.errorText(stats.reason)));
        }
        replace(lanes, lanesTable(lanesR));
        replace(execs, execTable(execR));
        replace(counters, countersTable(countR));
        if ([stats, lanesR, execR, leaderR].every(r => r.status === 'rejected')) throw stats.reason;
    });
}
