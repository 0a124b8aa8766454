"""A real browser for end-to-end tests: headless Chromium, driven through chromedriver with Selenium, signs in at the
test authorization server's login page, answers its consent page if it shows one, follows the redirect to the
agent's loopback listener and records what Chromium saw there. See ../README.md.

Same interface as fake-browser: one argument (the authorization URL); FAKE_BROWSER_MODE (login|deny: on the consent
page, Authorize or Cancel), FAKE_BROWSER_USER, FAKE_BROWSER_PASSWORD, FAKE_BROWSER_LOG. CHROMIUM_BINARY and
CHROMEDRIVER override /usr/bin/chromium and /usr/bin/chromedriver.

The log gets `START`, the steps taken, one `PAGE {json}` line (the listener's page: its URL with only the query's
parameter names, the document's HTTP status and response headers from Chrome's performance log, the title, the
visible text, console messages, and the main-frame navigation as `METHOD PATH -> STATUS`), then `DONE` or
`FAIL reason`. Nothing written anywhere carries a query value (code, state), a token or the password.
Bounded: the whole run, Chromium's start-up and shutdown included, is cut off after TIMEOUT seconds.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import parse_qs, urlsplit

TIMEOUT = 60
STEP_TIMEOUT = 20  # one page load, or waiting for the next page after a click
LOG = os.environ.get("FAKE_BROWSER_LOG")
CHROMIUM = os.environ.get("CHROMIUM_BINARY", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
# Run as root in CI: Chromium refuses to start there without --no-sandbox. --password-store=basic keeps Chromium
# out of the Secret Service (the test's private keyring holds only what the agent stores); no background traffic.
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                 "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-extensions", "--no-proxy-server", "--password-store=basic",
                 "--window-size=1024,768"]


class Failure(Exception):
    pass


def scrub(text):
    """Keeps the names of query parameters and drops their values (codes, states) in text that may quote a URL:
    `...?code=...&state=...`."""
    return re.sub(r"([?&][^=&?#\s\"'<>\\]+)=[^&#\s\"'<>\\]*", r"\1=...", str(text))


def log(line):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(scrub(line) + "\n")


def no_query(url):
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}{p.path}"


def on_timeout(signum, frame):
    raise Failure(f"gave up after {TIMEOUT} s")


def start_driver(profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise Failure(f"{path} is missing (install the Debian packages chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROMIUM_ARGS + [f"--user-data-dir={profile}"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    # An explicit driver path: Selenium Manager (which would download a driver) never runs.
    service = Service(executable_path=CHROMEDRIVER, log_output=subprocess.DEVNULL)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(STEP_TIMEOUT)
    return driver


# A pushed authorization request (RFC 9126): the URL has client_id and request_uri only, no redirect_uri. Then the
# callback is the first loopback http page on another host:port than the authorization server's (as fake-browser).
PUSHED = {"as_netloc": None}


def on_callback(url, callback):
    p, c = urlsplit(url), urlsplit(callback)
    if not callback and PUSHED["as_netloc"]:
        return p.scheme == "http" and p.hostname in ("127.0.0.1", "::1") and p.netloc != PUSHED["as_netloc"]
    return (p.scheme, p.netloc, p.path) == (c.scheme, c.netloc, c.path)


def next_page(driver, callback):
    """Waits until the page is the callback, a login form or a consent form; which one, and the form element."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if on_callback(driver.current_url, callback):
                return "callback", None
            if driver.execute_script("return document.readyState") == "complete":
                for kind, selector in (("login", "form input[name=password]"), ("consent", "form#authorizationForm")):
                    found = driver.find_elements(By.CSS_SELECTOR, selector)
                    if found:
                        return kind, found[0]
        except WebDriverException:
            pass  # the document went away mid-query (a navigation): look again
        time.sleep(0.1)
    raise Failure(f"stuck at {scrub(driver.current_url)} (title {driver.title!r}): no login form, no consent form, "
                  f"no redirect to the listener within {STEP_TIMEOUT} s")


def gone(error):
    """Whether a WebDriver error says the element's document was replaced (a navigation): Selenium's stale element,
    or Chromium's inspector answering "Node with given id does not belong to the document"."""
    from selenium.common.exceptions import StaleElementReferenceException

    text = str(error).lower()
    return isinstance(error, StaleElementReferenceException) or "does not belong to the document" in text \
        or "stale element" in text


def submit(driver, element, button):
    """Clicks `button` and waits until the page it was on is gone."""
    from selenium.common.exceptions import WebDriverException

    try:
        button.click()
    except WebDriverException as error:
        # Chromium may answer the click command after the form's navigation replaced the document: the click
        # happened. Had it not, the same page comes back and sign_in fails on it; any other error is a failure now.
        if not gone(error):
            raise
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            element.is_enabled()
        except WebDriverException as error:
            if gone(error):
                return
            raise
        time.sleep(0.05)
    raise Failure(f"the page at {scrub(driver.current_url)} stayed after its form was submitted ({STEP_TIMEOUT} s)")


def sign_in(driver, url, callback, mode):
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    driver.get(url)
    logged_in = consented = False
    for _ in range(10):
        kind, element = next_page(driver, callback)
        if kind == "callback":
            return
        try:
            if kind == "login":
                if logged_in:
                    raise Failure("login rejected (bad username/password?)")
                form = element.find_element(By.XPATH, "./ancestor::form")
                form.find_element(By.NAME, "username").send_keys(os.environ.get("FAKE_BROWSER_USER", "alice"))
                element.send_keys(os.environ.get("FAKE_BROWSER_PASSWORD", "correct-horse-battery"))
                log(f"LOGIN at {urlsplit(driver.current_url).path}")
                element, button = form, form.find_element(By.CSS_SELECTOR, "[type=submit]")
            else:
                if consented:
                    raise Failure("the consent page came back after it was answered")
                allow = mode == "login"
                button = element.find_element(By.CSS_SELECTOR, "input[name=allow]" if allow
                                              else "input[type=submit]:not([name=allow])")
                log(f"CONSENT {'approve' if allow else 'deny'} ({button.get_attribute('value')})")
        except WebDriverException as error:
            if not gone(error):
                raise
            log(f"RETRY the {kind} page was replaced while it was being filled in")
            continue  # nothing was submitted: find the page that replaced it
        submit(driver, element, button)
        if kind == "login":
            logged_in = True
        else:
            consented = True
    raise Failure("more than 10 pages before the listener")


def wait_loaded(driver):
    deadline = time.monotonic() + STEP_TIMEOUT
    while driver.execute_script("return document.readyState") != "complete":
        if time.monotonic() > deadline:
            raise Failure(f"the listener's page did not finish loading in {STEP_TIMEOUT} s")
        time.sleep(0.05)


def network_events(driver):
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        yield message["method"], message.get("params", {})


def what_was_seen(driver, callback):
    """The listener's page as Chromium saw it (see the module docstring)."""
    from selenium.webdriver.common.by import By

    navigation, document, methods, failed = [], None, {}, None
    for method, params in network_events(driver):
        url = (params.get("request") or params.get("response") or {}).get("url", "")
        if url and not url.startswith("http"):
            continue  # Chromium's own start page
        if method == "Network.requestWillBeSent" and params.get("type") == "Document":
            request_id, request = params["requestId"], params["request"]
            redirect = params.get("redirectResponse")
            if redirect:
                navigation.append(f"{methods.get(request_id, '?')} {no_query(redirect['url'])} -> {redirect['status']}")
            methods[request_id] = request["method"]
        elif method == "Network.responseReceived" and params.get("type") == "Document":
            response = params["response"]
            navigation.append(f"{methods.get(params['requestId'], '?')} {no_query(response['url'])} -> "
                              f"{response['status']}")
            if on_callback(response["url"], callback):
                document = response
        elif method == "Network.loadingFailed" and params.get("type") == "Document":
            failed = params.get("errorText")
    if document is None:
        raise Failure(f"no HTTP response from the listener ({failed or 'no document response logged'})")
    # Console messages about the listener's origin (a CSP violation would be one), not the authorization server's.
    origin = no_query(callback).removesuffix(urlsplit(callback).path)
    console = [scrub(f"{e['level']} {e['message']}") for e in driver.get_log("browser")
               if e["message"].startswith(origin + "/")]
    return {
        "url": scrub(driver.current_url),
        "status": document["status"],
        "headers": {name.lower(): value for name, value in document["headers"].items()},
        "title": driver.title,
        "text": driver.find_element(By.TAG_NAME, "body").text,
        # The page's own inline style applied (its CSP allows it): the colour it sets on <body>.
        "body_color": driver.execute_script("return getComputedStyle(document.body).color"),
        "console": console,
        "navigation": navigation,
    }


def main():
    mode = os.environ.get("FAKE_BROWSER_MODE", "login") or "login"
    if mode not in ("login", "deny"):
        print(f"chromium-browser: unsupported FAKE_BROWSER_MODE {mode!r} (login or deny)", file=sys.stderr)
        sys.exit(2)
    if len(sys.argv) != 2:
        print("usage: chromium-browser URL", file=sys.stderr)
        sys.exit(2)
    log(f"START mode={mode} pid={os.getpid()}")
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        os.environ.pop(var, None)  # Selenium talks to chromedriver on loopback: never through a proxy
    url = sys.argv[1]
    signal.signal(signal.SIGALRM, on_timeout)
    signal.alarm(TIMEOUT)
    driver = None
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="aa-chromium-") as profile:
            try:
                query = parse_qs(urlsplit(url).query)
                callback = query.get("redirect_uri", [""])[0]
                if not callback and query.get("request_uri"):
                    PUSHED["as_netloc"] = urlsplit(url).netloc
                elif urlsplit(callback).scheme != "http":
                    raise Failure("the authorization URL has no loopback http redirect_uri")
                driver = start_driver(profile)
                log(f"CHROMIUM {driver.capabilities.get('browserVersion', '?')} "
                    f"started in {time.monotonic() - started:.1f} s profile={profile}")
                sign_in(driver, url, callback, mode)
                if not callback:
                    callback = no_query(driver.current_url)  # the pushed redirect_uri, now that it is known
                wait_loaded(driver)
                seen = what_was_seen(driver, callback)
                log("PAGE " + json.dumps(seen, sort_keys=True))
            finally:
                if driver is not None:
                    signal.alarm(15)  # quitting is bounded too
                    try:
                        driver.quit()
                    except BaseException:
                        driver.service.process.kill()  # chromedriver; Chromium ends when its pipe closes
                        raise
                signal.alarm(0)
    except Exception as e:  # every failure, Selenium's included, ends here: a message without query values
        reason = str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        log(f"FAIL {reason}")
        print(f"chromium-browser: {scrub(reason)}", file=sys.stderr)
        sys.exit(1)
    log(f"DONE {mode} callback={seen['status']} in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
