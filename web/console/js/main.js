// main.js — the console's shell: login gate, hash router, live polling,
// theme and flash messages. Pages live in pages/*.js and export
// render(ctx); ctx.every() polls while the page is shown.
import {h, replace} from './dom.js';
import {auth, get, ApiError} from './api.js';
import * as login from './pages/login.js';
import * as overview from './pages/overview.js';
import * as jobs from './pages/jobs.js';
import * as job from './pages/job.js';
import * as instances from './pages/instances.js';
import * as instance from './pages/instance.js';
import * as flows from './pages/flows.js';
import * as flow from './pages/flow.js';
import * as executors from './pages/executors.js';
import * as dlq from './pages/dlq.js';

const ROUTES = [
    [/^overview$/, overview, 'overview'],
    [/^jobs$/, jobs, 'jobs'],
    [/^jobs\/([^/]+)$/, job, 'jobs'],
    [/^instances$/, instances, 'instances'],
    [/^instances\/([0-9]+)$/, instance, 'instances'],
    [/^flows$/, flows, 'flows'],
    [/^flows\/([^/]+)$/, flow, 'flows'],
    [/^executors$/, executors, 'executors'],
    [/^dlq$/, dlq, 'dlq'],
];

const state = {generation: 0, timers: new Set(), leave: [], whoami: null, moved: false};

function parseHash() {
    const raw = location.hash.replace(/^#\/?/, '');
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
    return {path: path || 'overview', query};
}

export function flash(message, kind = 'info') {
    const box = document.getElementById('flash');
    const item = h('div', {class: `flash flash-${kind === 'error' ? 'error' : 'info'}`},
        h('span', null, message),
        h('button', {type: 'button', class: 'icon-btn', 'aria-label': 'Dismiss',
            on: {click: () => item.remove()}}, '×'));
    box.appendChild(item);
    while (box.children.length > 3) box.firstChild.remove();
    setTimeout(() => item.remove(), kind === 'error' ? 15000 : 4000);
}

export function errorText(e) {
    if (e instanceof ApiError) {
        return `${e.status}${e.code ? ' ' + e.code : ''}: ${e.message}` +
            (e.field ? ` (field ${e.field})` : '');
    }
    return String(e && e.message ? e.message : e);
}

function stopTimers() {
    state.generation++;
    for (const t of state.timers) clearTimeout(t);
    state.timers.clear();
    for (const fn of state.leave.splice(0)) {
        try { fn(); } catch (_) { /* the page is gone anyway */ }
    }
}

// ctx.every(ms, fn): fn now and then every ms after it ends, while this page
// is shown; a hidden tab skips rounds. The first round's error is the page's
// (route() shows it); later ones mark the page stale until a round works.
function makeCtx(main, match, query) {
    const gen = state.generation;
    const ctx = {
        main, query, params: match.slice(1).map(decodeURIComponent),
        whoami: state.whoami,
        isAdmin: () => !state.whoami || state.whoami.scope === 'admin',
        alive: () => gen === state.generation,
        flash, errorText,
        navigate: hash => { if (location.hash === hash) route(); else location.hash = hash; },
        reload: () => route(),
        onLeave: fn => state.leave.push(fn),
        async every(ms, fn) {
            const next = () => {
                if (!ctx.alive()) return;
                const t = setTimeout(() => { state.timers.delete(t); round(); }, ms);
                state.timers.add(t);
            };
            const round = async () => {
                if (!ctx.alive()) return;
                if (!document.hidden) {
                    try { await fn(); markLive(true); } catch (e) { markLive(false, e); }
                }
                next();
            };
            await fn();
            markLive(true);
            next();
        },
    };
    return ctx;
}

function markLive(ok, e) {
    const el = document.getElementById('live');
    if (!el) return;
    el.className = ok ? 'live ok' : 'live stale';
    const t = new Date().toLocaleTimeString();
    el.textContent = ok ? `Live · updated ${t}` : `Not updated (${errorText(e)}) · ${t}`;
}

async function route() {
    stopTimers();
    const main = document.getElementById('main');
    const {path, query} = parseHash();
    if (!auth.token) return showLogin(main);
    const found = ROUTES.map(([re, mod, nav]) => [path.match(re), mod, nav]).find(([m]) => m);
    markNav(found ? found[2] : null);
    if (!found) {
        replace(main, h('h1', null, 'Not found'), h('p', null, 'No such page: ', path));
        return;
    }
    const [match, mod] = found;
    const ctx = makeCtx(main, match, query);
    replace(main, h('p', {class: 'muted'}, 'Loading…'));
    if (state.moved) main.focus({preventScroll: true});   // screen readers: the new page
    state.moved = true;
    try {
        await mod.render(ctx);
    } catch (e) {
        if (ctx.alive()) replace(main, h('h1', null, 'Error'), h('p', {class: 'error'}, errorText(e)));
    }
}

function markNav(page) {
    for (const a of document.querySelectorAll('#nav a')) {
        if (a.dataset.page === page) a.setAttribute('aria-current', 'page');
        else a.removeAttribute('aria-current');
    }
    document.getElementById('nav').classList.remove('open');
    document.getElementById('menu-toggle').setAttribute('aria-expanded', 'false');
}

function showLogin(main) {
    markNav(null);
    setWho(null);
    login.render({main, flash, errorText, onLogin: async (token, who) => {
        auth.set(token);
        state.whoami = who;
        setWho(who);
        if (!location.hash || location.hash === '#/login') location.hash = '#/overview';
        else route();
    }});
}

function setWho(who) {
    const el = document.getElementById('who');
    el.textContent = who ? `${who.name ?? 'token'} (${who.scope ?? '?'})` : '';
    document.getElementById('logout').hidden = !who && !auth.token;
    document.body.classList.toggle('logged-out', !who && !auth.token);
}

// The saved token is checked once at start (it may have been revoked).
async function start() {
    auth.onRefused = () => {
        auth.clear();
        state.whoami = null;
        flash('The token was refused (401): log in again.', 'error');
        route();
    };
    if (auth.token) {
        try { state.whoami = await get('/whoami'); } catch (e) {
            if (!(e instanceof ApiError && e.status === 401)) state.whoami = null;
        }
        setWho(state.whoami);
    }
    window.addEventListener('hashchange', route);
    route();
}

// Theme: auto (prefers-color-scheme) -> dark -> light, kept in localStorage.
const THEMES = ['auto', 'dark', 'light'];
function applyTheme(t) {
    if (t === 'auto') document.documentElement.removeAttribute('data-theme');
    else document.documentElement.setAttribute('data-theme', t);
    const b = document.getElementById('theme-toggle');
    b.textContent = `Theme: ${t}`;
    b.setAttribute('aria-label', `Colour theme: ${t} (change)`);
    document.dispatchEvent(new CustomEvent('ax-theme'));
}

function setupChrome() {
    let theme = localStorage.getItem('ax.theme');
    if (!THEMES.includes(theme)) theme = 'auto';
    applyTheme(theme);
    document.getElementById('theme-toggle').addEventListener('click', () => {
        theme = THEMES[(THEMES.indexOf(theme) + 1) % THEMES.length];
        localStorage.setItem('ax.theme', theme);
        applyTheme(theme);
    });
    document.getElementById('logout').addEventListener('click', () => {
        auth.clear();
        state.whoami = null;
        location.hash = '#/overview';
        route();
    });
    const menu = document.getElementById('menu-toggle');
    menu.addEventListener('click', () => {
        const open = document.getElementById('nav').classList.toggle('open');
        menu.setAttribute('aria-expanded', String(open));
    });
}

setupChrome();
start();
