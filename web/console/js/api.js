// api.js — the REST API client: a bearer token from sessionStorage in the
// Authorization header of every call (no cookies, so no CSRF), JSON in and
// out, errors as ApiError with the API's code and offending field.

const TOKEN_KEY = 'ax.token';
export const BASE = '/api/v1';

export class ApiError extends Error {
    constructor(status, code, field, message) {
        super(message || code || `HTTP ${status}`);
        this.status = status;
        this.code = code;
        this.field = field;
    }
}

export const auth = {
    get token() { return sessionStorage.getItem(TOKEN_KEY); },
    set(token) { sessionStorage.setItem(TOKEN_KEY, token); },
    clear() { sessionStorage.removeItem(TOKEN_KEY); },
    onRefused: () => {},   // set by main.js: back to the login page
};

async function errorOf(res) {
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    const e = body && (body.error && typeof body.error === 'object' ? body.error : body);
    const str = v => (typeof v === 'string' ? v : undefined);
    return new ApiError(res.status, str(e && e.code) || str(e && e.error),
        str(e && e.field), str(e && e.message) || `HTTP ${res.status} ${res.statusText}`);
}

// request('GET', '/jobs', null, {limit: 50}) -> the parsed JSON body.
export async function request(method, path, body, query, token = auth.token) {
    const url = new URL(BASE + path, location.origin);
    for (const [k, v] of Object.entries(query || {})) {
        if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
    }
    const headers = {Accept: 'application/json'};
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = {method, headers, credentials: 'omit', cache: 'no-store'};
    if (body !== null && body !== undefined) {
        headers['Content-Type'] = 'application/json';
        init.body = JSON.stringify(body);
    }
    const res = await fetch(url, init);
    if (!res.ok) {
        const err = await errorOf(res);
        if (res.status === 401 && token === auth.token) auth.onRefused(err);
        throw err;
    }
    if (res.status === 204) return null;
    const type = res.headers.get('Content-Type') || '';
    return type.includes('json') ? res.json() : null;
}

export const get = (path, query) => request('GET', path, null, query);
export const post = (path, body) => request('POST', path, body === undefined ? {} : body);
export const put = (path, body) => request('PUT', path, body);
export const patch = (path, body) => request('PATCH', path, body);
export const del = path => request('DELETE', path);

// The items of a list response and its keyset cursor, whatever the API
// names them ({items, next} preferred).
export function listOf(res, ...names) {
    if (Array.isArray(res)) return {items: res, next: null};
    if (!res || typeof res !== 'object') return {items: [], next: null};
    let items = [];
    for (const n of [...names, 'items', 'data', 'results']) {
        if (Array.isArray(res[n])) { items = res[n]; break; }
    }
    const next = res.next ?? res.next_cursor ?? res.cursor ?? (res.page && res.page.next) ?? null;
    return {items, next: next === '' ? null : next};
}

export const enc = encodeURIComponent;
