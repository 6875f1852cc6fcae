#!/usr/bin/python3
"""The web console in real headless Chromium (driven by 207_console.sh).

Against a running ax stack with ax-api: a wrong token is refused; log in;
create a job in the form, run it and watch its instance page reach FINISHED
without a reload; retry it; create a sleeping job, run it, cancel it on its
page and see it end CANCELLED and its process end; filter instances; a
cron job's DST-marked next fires; keyset pages; the overview names the standby
trigger; show a DLQ record and replay it; visit every page and
save screenshots (light, dark, phone width) under --out, printing each path.

The tokens come from the environment (AX_CONSOLE_TOKEN: admin,
AX_CONSOLE_READ_TOKEN: read), never argv; at the end the read token logs in
and finds the job page's actions disabled.
Writes the ids it made to --out/ids (job, echo_instance, sleep_instance,
replay_action) for the shell test to check against PostgreSQL.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

CHROME_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync',
               '--disable-dev-shm-usage', '--window-size=1280,1000']


class Failed(Exception):
    pass


class Console:
    def __init__(self, base, out, profile):
        self.base, self.out = base, out
        opts = webdriver.ChromeOptions()
        opts.binary_location = '/usr/bin/chromium'
        for a in CHROME_ARGS + ['--user-data-dir=' + profile]:
            opts.add_argument(a)
        opts.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
        self.d = webdriver.Chrome(service=Service('/usr/bin/chromedriver'), options=opts)
        self.d.set_page_load_timeout(60)
        self.shots = []

    def log(self, msg):
        print(f'[console_browser {time.strftime("%H:%M:%S")}] {msg}', flush=True)

    def wait(self, what, cond, secs=60):
        """Poll cond() until truthy (its value returned) or fail naming what."""
        deadline = time.monotonic() + secs
        last = None
        while time.monotonic() < deadline:
            try:
                v = cond()
                if v:
                    return v
            except WebDriverException as e:
                last = e
            time.sleep(0.2)
        self.shot('FAILED-' + what.replace(' ', '-')[:40])
        raise Failed(f'timed out after {secs}s waiting for: {what}' + (f' ({last.msg})' if last else ''))

    def el(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def els(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def type(self, what, css, text):
        """Type text into the field css, found again if the page re-rendered it
        meanwhile (a stale element: the login form drawn twice after a logout)."""
        def typed():
            e = self.el(css)
            e.clear()
            e.send_keys(text)
            return e.get_attribute('value') == text
        self.wait(what, typed, 30)

    def text(self, css):
        found = self.els(css)
        return found[0].text if found else ''

    def go(self, hash_path):
        self.d.execute_script('location.hash = arguments[0]', hash_path)

    def shot(self, name):
        path = os.path.join(self.out, name + '.png')
        self.d.save_screenshot(path)
        self.shots.append(path)
        print(f'screenshot: {path}', flush=True)

    def accept_confirm(self):
        alert = self.wait('the confirm dialog', lambda: self._alert(), 10)
        alert.accept()

    def _alert(self):
        try:
            return self.d.switch_to.alert
        except NoAlertPresentException:
            return None

    def theme(self, want):
        for _ in range(3):
            if self.el('#theme-toggle').text == f'Theme: {want}':
                return
            self.el('#theme-toggle').click()
        raise Failed(f'theme toggle never reached {want}')

    def phone(self, on):
        if on:
            self.d.execute_cdp_cmd('Emulation.setDeviceMetricsOverride',
                                   {'width': 390, 'height': 844, 'deviceScaleFactor': 1, 'mobile': True})
        else:
            self.d.execute_cdp_cmd('Emulation.clearDeviceMetricsOverride', {})

    def js_errors(self):
        return [e for e in self.d.get_log('browser')
                if e.get('level') == 'SEVERE' and e.get('source') == 'javascript']


def login(c, token):
    c.d.get(c.base + '/')
    c.wait('the login form', lambda: c.els('#token'))
    c.type('the wrong token typed', '#token', 'not-the-token')
    c.el('form.login button[type=submit]').click()
    c.wait('the wrong token refused', lambda: 'refused' in c.text('#login-error'))
    if c.els('#nav a[aria-current]') or sessionStorage(c):
        raise Failed('a wrong token was kept')
    c.shot('login-refused-light')
    c.type('the token typed', '#token', token)
    c.el('form.login button[type=submit]').click()
    c.wait('the overview after login', lambda: 'Live' in c.text('#live'))
    if c.d.get_cookies():
        raise Failed(f'the console set cookies: {c.d.get_cookies()}')
    c.log('logged in; wrong token refused')


def sessionStorage(c):
    return c.d.execute_script("return sessionStorage.getItem('ax.token')")


def create_job(c, name, argv, cron=None, tz=None):
    c.go('#/jobs?new=1')
    c.wait('the create-job form', lambda: c.els('#create-job #j-name'))
    c.el('#j-name').send_keys(name)
    c.el('#j-command').send_keys('\n'.join(argv))
    if cron:
        Select(c.el('#j-kind')).select_by_value('cron')
        c.el('#j-expr').send_keys(cron)
        c.el('#j-tz').send_keys(tz)
    c.el('#create-job button[type=submit]').click()
    c.wait(f'the page of job {name}', lambda: name in c.text('main h1') and c.els('#live'))
    c.log(f'created job {name}')


def run_now(c):
    """Run now on a job page: the console opens the new instance's page."""
    c.wait('the Run now button', lambda: [b for b in c.els('main .buttons button') if b.text == 'Run now'])[0].click()
    c.wait('the instance page', lambda: c.els('#instance-state'), 90)
    iid = c.d.execute_script('return location.hash').rsplit('/', 1)[-1]
    c.d.execute_script('window.__axNoReload = true')
    return iid


def state_of(c):
    s = c.els('#instance-state')
    return (s[0].get_attribute('data-state'), s[0].get_attribute('data-outcome')) if s else (None, None)


HOSTILE = '<img src=x id=ax-injected><script>window.axInjected=1</script>'


def watch_echo(c, name, marker):
    # The output is untrusted: it must show as text, never become elements.
    create_job(c, name, ['/bin/echo', marker, HOSTILE])
    c.shot('job-created-light')
    iid = run_now(c)
    seen = set()

    def finished():
        st = state_of(c)[0]
        seen.add(st)
        return st == 'FINISHED'
    c.wait(f'instance {iid} FINISHED on its page', finished, 90)
    if not c.d.execute_script('return window.__axNoReload === true'):
        raise Failed('the instance page was reloaded')
    if state_of(c)[1] != 'SUCCESS':
        raise Failed(f'instance {iid} ended {state_of(c)}')
    c.wait('the output shown', lambda: marker in c.text('pre.output'), 30)
    if HOSTILE not in c.text('pre.output') or c.els('#ax-injected') or \
            c.d.execute_script('return window.axInjected === 1'):
        raise Failed('the output was not shown as plain text')
    c.wait('the FINISHED step in the timeline', lambda: c.els('.tl-step.reached.s-FINISHED'))
    c.log(f'instance {iid} went through {sorted(s for s in seen if s)} to FINISHED on one page')
    c.shot('instance-finished-light')
    return iid


def retry_finished(c, iid):
    """Retry on a finished instance's page opens the new instance."""
    c.go(f'#/instances/{iid}')
    c.wait('the Retry button', lambda: c.els('button.retry'))[0].click()
    c.wait('the retry instance page', lambda: c.d.execute_script('return location.hash')
           != f'#/instances/{iid}' and c.els('#instance-state'), 90)
    new = c.d.execute_script('return location.hash').rsplit('/', 1)[-1]
    if not new.isdigit() or int(new) <= int(iid):
        raise Failed(f'Retry of {iid} opened {new}')
    c.wait(f'the retry {new} FINISHED', lambda: state_of(c) == ('FINISHED', 'SUCCESS'), 90)
    c.log(f'retry of {iid} is instance {new}, FINISHED SUCCESS')
    return new


def cancel_sleeper(c, name, seconds):
    create_job(c, name, ['/bin/sleep', str(seconds)])
    iid = run_now(c)
    c.wait(f'instance {iid} RUNNING', lambda: state_of(c)[0] == 'RUNNING', 90)
    sleeping = lambda: subprocess.run(['pgrep', '-f', f'^/bin/sleep {seconds}$'],
                                      stdout=subprocess.DEVNULL).returncode == 0
    c.wait(f'the process /bin/sleep {seconds} running', sleeping, 30)
    c.shot('instance-running-light')
    c.wait('the Cancel button', lambda: c.els('button.cancel'))[0].click()
    c.accept_confirm()
    c.wait(f'instance {iid} CANCELLED on its page',
           lambda: state_of(c) == ('FINISHED', 'CANCELLED'), 120)
    if not c.d.execute_script('return window.__axNoReload === true'):
        raise Failed('the instance page was reloaded')
    c.wait(f'the process /bin/sleep {seconds} gone', lambda: not sleeping(), 30)
    c.log(f'instance {iid} cancelled, its process gone')
    c.shot('instance-cancelled-light')
    return iid


def overview_standby(c, holder):
    """The overview's leader card names the standby trigger (its heartbeat
    row), updating live."""
    c.go('#/overview')
    c.wait(f'the overview naming standby {holder}',
           lambda: '1 standby(s)' in c.text('#standbys') and holder in c.text('#standbys'), 30)
    c.log(f'overview: {c.text("#standbys")}')


def replay_dlq(c):
    c.go('#/dlq')
    rows = c.wait('a DLQ record listed', lambda: c.els('main table.grid tbody tr td a'), 60)
    rows[0].click()
    c.wait('the DLQ record shown', lambda: c.els('#dlq-entry button.replay'))
    c.shot('dlq-entry-light')
    # 503 means Kafka did not acknowledge in time (docs/API.md: retry later):
    # the console shows it and the operator clicks again; so does this test.
    res = None
    for attempt in range(3):
        c.d.execute_script("document.getElementById('flash').replaceChildren()")
        c.wait('the Replay button enabled', lambda: c.el('#dlq-entry button.replay').is_enabled(), 60)
        c.el('#dlq-entry button.replay').click()
        c.accept_confirm()
        got = c.wait('the replay result or its error', lambda: c.els('.replay-result') or
                     [e for e in c.els('#flash .flash-error') if e.text], 90)[0]
        if 'replay-result' in (got.get_attribute('class') or ''):
            res = got
            break
        if '503' not in got.text:
            raise Failed(f'the replay failed: {got.text}')
        c.log(f'replay attempt {attempt + 1}: {got.text}')
    if res is None:
        raise Failed('the replay answered 503 three times')
    action = res.get_attribute('data-action')
    if action not in ('produced', 'resubmitted', 'already_replayed'):
        raise Failed(f'replay answered {action!r}: {res.text}')
    c.log(f'DLQ replay: {res.text}')
    c.shot('dlq-replayed-light')
    return action


def cron_dst(c, name):
    """A cron job in Europe/Berlin at 02:30 on March Sundays: its next fires
    include 2027-03-28, moved out of the spring-forward gap (DST shifted)."""
    create_job(c, name, ['/bin/true'], cron='30 2 * 3 SUN', tz='Europe/Berlin')
    mark = c.wait('a DST mark among the next fires', lambda: c.els('ol.fires .b-dst'), 30)[0]
    if mark.text != 'DST shifted':
        raise Failed(f'the DST mark says {mark.text!r}')
    times = [li.text for li in c.els('ol.fires li') if 'DST' in li.text]
    if not times or not times[0].startswith('Sun 2027-03-28 03:30:00 +02:00'):
        raise Failed(f'the shifted fire is {times}')
    c.shot('job-cron-dst-light')
    c.log(f'job {name}: next fires marked {times[0]}')


def filter_instances(c, job, want, not_want):
    """The instances page's filter form: job + outcome CANCELLED."""
    c.go('#/instances')
    c.wait('the instance filters', lambda: c.els('#f-job'))
    c.el('#f-job').send_keys(job)
    c.d.execute_script("document.getElementById('f-outcome').value = 'CANCELLED'")
    c.el('form.filters button[type=submit]').click()
    ids = lambda: [a.text for a in c.els('#instance-list tbody td a')]
    c.wait(f'instance {want} listed by the filter', lambda: f'#{want}' in ids())
    if f'#{not_want}' in ids() or 'outcome=CANCELLED' not in c.d.execute_script('return location.hash'):
        raise Failed(f'the filter listed {ids()}')
    c.shot('instances-filtered-light')


def paging(c, base, token, job):
    """Keyset pages of 50: 55 more runs of job, then Older and Newer."""
    for _ in range(55):
        api(base, token, 'POST', '/instances', {'job': job})
    count = lambda: len(api(base, token, 'GET', f'/instances?job={job}&limit=500')['items'])
    c.wait('56 instances of the job', lambda: count() >= 56, 120)
    c.go(f'#/instances?job={job}')
    rows = lambda: [a.text for a in c.els('#instance-list tbody td a')]
    c.wait('a first page of 50', lambda: len(rows()) == 50, 30)
    first = rows()
    c.el('button.next-page').click()
    c.wait('the older page', lambda: 'cursor=' in c.d.execute_script('return location.hash')
           and rows() and rows() != first, 30)
    older = rows()
    newest_older = int(older[0].lstrip('#'))
    if set(older) & set(first) or newest_older >= min(int(x.lstrip('#')) for x in first):
        raise Failed(f'the older page {older[:3]}... overlaps or is not older than {first[-3:]}')
    c.shot('instances-older-page-light')
    # "Newer" until the newest page is back: no cursor, and its newest row at
    # least as new as the first page's (an instance created meanwhile may lead
    # it). The click is repeated while the older page shows: the live refresh
    # can redraw the pager between finding the button and clicking it.
    num = lambda r: int(r.lstrip('#'))

    def back():
        if 'cursor=' in c.d.execute_script('return location.hash'):
            newer = [b for b in c.els('nav.pager button') if 'Newer' in b.text]
            if newer and newer[0].is_enabled():
                newer[0].click()
            return False
        return rows() and num(rows()[0]) >= num(first[0]) and len(rows()) == 50
    c.wait('back to the first page', back, 30)
    c.log(f'paged: {len(first)} then {len(older)} instances, and back')


def read_only(c, token, job):
    """A read token sees the pages; the buttons that change things are disabled."""
    c.el('#logout').click()
    c.wait('the login form again', lambda: c.els('#token'))
    c.type('the read token typed', '#token', token)
    c.el('form.login button[type=submit]').click()
    c.wait('logged in as the read token', lambda: '(read)' in c.text('#who'))
    c.go(f'#/jobs/{job}')
    run = c.wait('the job page', lambda: [b for b in c.els('main .buttons button') if b.text == 'Run now'])[0]
    if run.is_enabled():
        raise Failed('Run now is enabled for a read token')
    c.shot('job-read-only-light')
    c.log('a read token sees the job page with its actions disabled')


def api(base, token, method, path, body=None):
    req = urllib.request.Request(base + '/api/v1' + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={'Authorization': 'Bearer ' + token,
                                          'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b'null')


def phone_menu(c):
    """At phone width the navigation folds under Menu."""
    c.go('#/overview')
    nav = c.el('#nav')
    c.wait('the navigation folded', lambda: not nav.is_displayed() and c.el('#menu-toggle').is_displayed())
    c.el('#menu-toggle').click()
    c.wait('the navigation open', lambda: nav.is_displayed())
    c.shot('menu-phone')
    c.el('#nav a[data-page=executors]').click()
    c.wait('the executors page from the menu', lambda: c.d.execute_script('return location.hash') == '#/executors'
           and not nav.is_displayed())


def tour(c, pages, tag):
    for hash_path, name, ready in pages:
        c.go(hash_path)
        c.wait(f'{name} rendered', lambda: c.els(ready) and not c.els('main > p.muted:only-child'), 30)
        c.d.execute_script("document.getElementById('flash').replaceChildren()")   # toasts off the picture
        time.sleep(0.3)   # let a chart draw before the picture (not an assertion)
        c.shot(f'{name}-{tag}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--base', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--job-prefix', required=True)
    ap.add_argument('--sleep-seconds', type=int, required=True)
    ap.add_argument('--marker', required=True)
    ap.add_argument('--profile', help="Chromium's user data dir (fresh; default a new temporary one)")
    ap.add_argument('--standby', help="the holder of the standby trigger the overview must name")
    a = ap.parse_args()
    token = os.environ['AX_CONSOLE_TOKEN']
    os.makedirs(a.out, exist_ok=True)
    c = Console(a.base, a.out, a.profile or tempfile.mkdtemp(prefix='ax-chromium-'))
    ids = {}
    try:
        login(c, token)
        c.theme('light')
        if a.standby:
            overview_standby(c, a.standby)
        ids['job'] = a.job_prefix + 'echo'
        ids['echo_instance'] = watch_echo(c, ids['job'], a.marker)
        ids['retry_instance'] = retry_finished(c, ids['echo_instance'])
        ids['sleep_job'] = a.job_prefix + 'sleep'
        ids['sleep_instance'] = cancel_sleeper(c, ids['sleep_job'], a.sleep_seconds)
        filter_instances(c, ids['sleep_job'], ids['sleep_instance'], ids['echo_instance'])
        cron_dst(c, a.job_prefix + 'cron')
        paging(c, a.base, token, ids['job'])
        flow = a.job_prefix + 'flow'
        api(a.base, token, 'POST', '/flows', {'name': flow, 'on_failure': 'stop', 'stages': [
            {'name': 'first', 'job': ids['job'], 'after': []},
            {'name': 'second', 'job': ids['job'], 'after': ['first']},
            {'name': 'third', 'job': ids['job'], 'after': ['first']},
            {'name': 'last', 'job': ids['job'], 'after': ['second', 'third']}]})
        api(a.base, token, 'POST', f'/flows/{flow}/runs')
        pages = [('#/overview', 'overview', '#chart-finished > *'),
                 ('#/jobs', 'jobs', 'table.grid'),
                 (f'#/jobs/{ids["job"]}', 'job', 'main table.grid'),
                 (f'#/instances?job={ids["job"]}', 'instances', '#instance-list table.grid'),
                 (f'#/instances/{ids["echo_instance"]}', 'instance', '.timeline'),
                 ('#/flows', 'flows', 'table.grid'),
                 (f'#/flows/{flow}', 'flow', 'svg.dag .dag-node'),
                 ('#/executors', 'executors', 'table.grid')]
        tour(c, pages, 'light')
        c.go('#/flows/' + flow)
        c.wait('the flow DAG: 4 stages, 4 edges', lambda: len(c.els('svg.dag .dag-node')) == 4
               and len(c.els('svg.dag .dag-edge')) == 4)
        c.wait('the flow run drawn with stage states',
               lambda: any(n.get_attribute('data-state') for n in c.els('svg.dag .dag-node')), 30)
        c.theme('dark')
        tour(c, pages, 'dark')
        c.theme('light')
        c.phone(True)
        phone_menu(c)
        tour(c, [p for p in pages if p[1] in ('overview', 'jobs', 'instance', 'flow')], 'phone')
        c.phone(False)
        ids['replay_action'] = replay_dlq(c)
        dlq = [('#/dlq', 'dlq', 'main table.grid tbody tr')]
        c.theme('dark')
        tour(c, dlq, 'dark')
        c.theme('light')
        c.phone(True)
        tour(c, dlq, 'phone')
        c.phone(False)
        read_only(c, os.environ['AX_CONSOLE_READ_TOKEN'], ids['job'])
        errs = c.js_errors()
        if errs:
            raise Failed(f'JavaScript errors in the console: {errs}')
    except Failed as e:
        print(f'FAIL: {e}', flush=True)
        return 1
    finally:
        with open(os.path.join(a.out, 'ids'), 'w') as f:
            for k, v in ids.items():
                f.write(f'{k}={v}\n')
        c.d.quit()
    c.log(f'{len(c.shots)} screenshots in {a.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
