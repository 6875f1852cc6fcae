// dom.js — building the page without innerHTML: every value from the API is
// untrusted, so it only ever becomes a text node or an attribute value.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, kids) {
    for (const k of kids) {
        if (k === null || k === undefined || k === false) continue;
        if (Array.isArray(k)) append(el, k);
        else if (k instanceof Node) el.appendChild(k);
        else el.appendChild(document.createTextNode(String(k)));
    }
}

function setAttrs(el, attrs) {
    for (const [name, v] of Object.entries(attrs || {})) {
        if (v === null || v === undefined || v === false) continue;
        if (name === 'on') {
            for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
        } else if (name === 'text') {
            el.textContent = String(v);
        } else if (name === 'value' && 'value' in el) {
            el.value = String(v);
        } else if (name.startsWith('on')) {
            throw new Error('event handlers go in attrs.on, not ' + name);
        } else {
            el.setAttribute(name, v === true ? '' : String(v));
        }
    }
}

// h('a', {href: '#/jobs', class: 'x'}, 'text', child, [more]) — an element.
export function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
}

// s('rect', {...}) — an SVG element (same rules as h).
export function s(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
}

export function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
}

export function replace(el, ...kids) {
    clear(el);
    append(el, kids);
    return el;
}

// The first defined value among names of obj (the API's field names are
// read in one place each; a missing field shows as '—').
export function pick(obj, ...names) {
    if (!obj || typeof obj !== 'object') return undefined;
    for (const n of names) {
        if (obj[n] !== undefined && obj[n] !== null) return obj[n];
    }
    return undefined;
}

export function show(v) {
    if (v === undefined || v === null || v === '') return '—';
    if (Array.isArray(v)) return v.map(String).join(' ');
    if (typeof v === 'object') return JSON.stringify(v);
    return String(v);
}

// A command's argv as a shell would need it typed: plain words as they are,
// others in single quotes (display only: commands never go through a shell).
export function argvText(argv) {
    if (!Array.isArray(argv)) return show(argv);
    return argv.map(a => {
        const t = String(a);
        return /^[A-Za-z0-9_\/.:=@%+,-]+$/.test(t) ? t : `'${t.replace(/'/g, "'\\''")}'`;
    }).join(' ');
}

export function toDate(v) {
    if (v === undefined || v === null || v === '') return null;
    const d = typeof v === 'number' ? new Date(v) : new Date(String(v));
    return Number.isNaN(d.getTime()) ? null : d;
}

// A <time> element: the local time shown, the UTC ISO form as its title.
export function timeEl(v) {
    const d = toDate(v);
    if (!d) return h('span', {class: 'muted'}, '—');
    const iso = d.toISOString();
    return h('time', {datetime: iso, title: iso}, fmtLocal(d));
}

export function fmtLocal(d) {
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
        `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

export function fmtDur(ms) {
    if (ms === undefined || ms === null || !Number.isFinite(Number(ms))) return '—';
    ms = Number(ms);
    const sign = ms < 0 ? '−' : '';
    ms = Math.abs(ms);
    if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
    if (ms < 60000) return `${sign}${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    if (ms < 3600000) return `${sign}${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
    if (ms < 86400000) return `${sign}${Math.floor(ms / 3600000)} h ${Math.round((ms % 3600000) / 60000)} min`;
    return `${sign}${Math.floor(ms / 86400000)} d ${Math.round((ms % 86400000) / 3600000)} h`;
}

// Only known words become CSS classes; anything else is 'unknown'.
const BADGE = new Set(['SCHEDULED', 'LOCKED', 'RUNNING', 'FINISHED', 'SUCCESS', 'FAILED',
    'TIMEOUT', 'CANCELLED', 'pending', 'running', 'succeeded', 'failed', 'skipped',
    'enabled', 'disabled', 'open', 'closed', 'half_open', 'alive', 'lost', 'leader', 'standby',
    'draining', 'stopped', 'fired', 'queued', 'skipped_overlap', 'skipped_misfire',
    'skipped_circuit', 'deferred', 'deferring', 'rejected', 'final_failure']);

export function badge(word) {
    const w = word === undefined || word === null ? '' : String(word);
    const cls = BADGE.has(w) ? w : 'unknown';
    return h('span', {class: `badge b-${cls}`}, w || '—');
}

// A table: cols = [[heading, row => cell content], ...].
export function table(cols, rows, {caption, empty = 'Nothing to show.'} = {}) {
    const head = h('thead', null, h('tr', null, cols.map(([t]) => h('th', {scope: 'col'}, t))));
    const body = h('tbody', null, rows.map(r =>
        h('tr', null, cols.map(([t, f]) => h('td', {'data-label': t}, f(r))))));
    const tbl = h('table', {class: 'grid'}, caption ? h('caption', null, caption) : null, head, body);
    if (!rows.length) return h('div', null, tbl, h('p', {class: 'muted empty'}, empty));
    return h('div', {class: 'table-wrap'}, tbl);
}

// A definition list of [term, value] pairs.
export function dl(pairs) {
    return h('dl', {class: 'kv'}, pairs.filter(Boolean).map(([k, v]) =>
        [h('dt', null, k), h('dd', null, v instanceof Node ? v : show(v))]));
}

export function link(href, text) {
    return h('a', {href}, show(text));
}

// '#/instances/' + an id: only the URL-encoded form goes into the href.
export function hashHref(...parts) {
    return '#/' + parts.map(p => encodeURIComponent(String(p))).join('/');
}
