#!/usr/bin/env python3
"""The status page in headless Chromium, end to end.

usage: status_page.py BALANCER_URL ADMIN_TOKEN NODE_TO_REMOVE [--screenshot PNG]

Opens /status, gives the admin token at its prompt, waits for every node of
the balancer to show up, presses a few sessions, then removes NODE_TO_REMOVE
through the admin API and waits for the page (left open, polling) to drop
its row and show the removal among the events; then opens it afresh from a
link carrying the token and checks that its first poll draws the history
the replica kept. Exits non-zero on failure.
"""
import json
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def api(url, token, method="GET", body=None):
    request = urllib.request.Request(url, method=method, data=body and json.dumps(body).encode())
    request.add_header("Authorization", "Bearer " + token)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or "null")


def main():
    args = sys.argv[1:]
    screenshot = None
    if "--screenshot" in args:
        i = args.index("--screenshot")
        screenshot = args[i + 1]
        del args[i : i + 2]
    base, token, removed = args
    nodes = api(base + "/nodes", token)
    up = [n for n in nodes if n["state"] == "up"]
    assert any(n["address"] == removed for n in up), f"{removed} is not an up node: {nodes}"

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,720"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    # The page redraws its table on every poll, so an element found a moment
    # ago may be gone: that is a retry, not a failure.
    wait = WebDriverWait(driver, 15, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException])
    try:
        driver.get(base + "/status")
        # It asks for the token once.
        field = wait.until(lambda d: d.find_element(By.ID, "token") if d.find_element(By.ID, "login").is_displayed() else None)
        field.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#login button").click()

        def rows(d):
            return {r.get_attribute("data-address"): r for r in d.find_elements(By.CSS_SELECTOR, "#nodes tbody tr[data-address]")}

        addresses = {n["address"] for n in nodes}
        wait.until(lambda d: set(rows(d)) == addresses)
        for node in up:
            row = rows(driver)[node["address"]]
            assert row.get_attribute("data-state") == "up", node
            assert row.find_element(By.CSS_SELECTOR, ".name").text == node["name"]
        print(f"status page shows {len(addresses)} nodes")

        # Presses show up as a rate and a chart.
        for i in range(30):
            request = urllib.request.Request(base + "/press", method="POST",
                                             data=json.dumps({"session_id": f"status-page-{i % 6}"}).encode())
            request.add_header("Content-Type", "application/json")
            urllib.request.urlopen(request, timeout=10).read()
        wait.until(lambda d: any(float(r.find_element(By.CSS_SELECTOR, ".rate").text) > 0 for r in rows(d).values()))
        assert driver.find_elements(By.CSS_SELECTOR, "#nodes svg.chart polyline")
        print("status page shows presses per second")
        if screenshot:
            driver.save_screenshot(screenshot)

        # Removed through the API: the open page follows.
        api(base + "/node", token, "POST", {"action": "remove", "address": removed})
        wait.until(lambda d: removed not in rows(d))
        wait.until(lambda d: any(
            e.find_element(By.CSS_SELECTOR, ".action").text == "removed" and removed in e.text
            for e in d.find_elements(By.CSS_SELECTOR, "#events tbody tr.event")))
        print(f"status page dropped {removed} and shows its removal")

        # A link that carries the token opens the page without the prompt,
        # and the token leaves the address bar.
        # Four samples of the replica's (three rates) before the fresh tab
        # opens: what its first poll must draw.
        deadline = time.time() + 20
        while min(len(n["points"]) for n in api(base + "/status/history", token)["nodes"]) < 4:
            assert time.time() < deadline, "the replica kept fewer than four samples in 20 s"
            time.sleep(0.5)
        driver.execute_script("sessionStorage.clear()")
        driver.get("about:blank")  # a fragment alone would not load the page again
        driver.get(base + "/status#token=" + token)
        wait.until(lambda d: set(rows(d)) == addresses - {removed})
        assert not driver.find_element(By.ID, "login").is_displayed(), "the prompt came back"
        assert "token" not in driver.current_url, driver.current_url
        print("status page opens from a link with the token, and drops it from the URL")

        # That fresh tab drew the seconds before it on its first poll (a
        # page keeping its own history had one sample then, and drew
        # nothing): the replica keeps the history, not the page.
        drawn = [len(p.get_attribute("points").split()) for p in
                 driver.find_elements(By.CSS_SELECTOR, "#nodes svg.chart polyline")]
        assert drawn and min(drawn) >= 3, f"a fresh tab drew {drawn} points per chart"
        print(f"a fresh tab draws the replica's history at once ({max(drawn)} points)")
    except Exception:
        print(driver.find_element(By.TAG_NAME, "body").text, file=sys.stderr)
        raise
    finally:
        driver.quit()


main()
