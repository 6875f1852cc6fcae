// login.js — the bearer token form. The token is checked with
// GET /api/v1/whoami before it is kept (sessionStorage, never a cookie).
import {h, replace} from '../dom.js';
import {request, ApiError} from '../api.js';

export function render({main, errorText, onLogin}) {
    const input = h('input', {id: 'token', name: 'token', type: 'password', required: true,
        autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'token-help'});
    const msg = h('p', {id: 'login-error', class: 'error', role: 'alert'});
    const button = h('button', {type: 'submit', class: 'primary'}, 'Log in');
    const form = h('form', {class: 'card login', novalidate: true},
        h('h1', null, 'Log in to ax'),
        h('label', {for: 'token'}, 'API token'),
        input,
        h('p', {id: 'token-help', class: 'muted small'},
            'A bearer token from ax-api\'s configuration (infra/up prints one). ' +
            'It is kept in this tab only and sent as an Authorization header.'),
        button, msg);
    form.addEventListener('submit', async ev => {
        ev.preventDefault();
        const token = input.value.trim();
        msg.textContent = '';
        if (!token) { msg.textContent = 'Enter a token.'; input.focus(); return; }
        button.disabled = true;
        try {
            const who = await request('GET', '/whoami', null, null, token);
            await onLogin(token, who);
        } catch (e) {
            msg.textContent = e instanceof ApiError && e.status === 401
                ? 'Token refused (401 unauthorized).' : `Cannot log in: ${errorText(e)}`;
            input.select();
            input.focus();
        } finally {
            button.disabled = false;
        }
    });
    replace(main, form);
    input.focus();
}
