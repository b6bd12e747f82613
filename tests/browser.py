"""The real headless browser the page tests drive (the chat page of nemotron.serve, the run browser of
`python -m nemotron.artifact browse`): the system's Chromium through Selenium, never a download."""

from __future__ import annotations

import pytest


def headless_chromium():
    """A Selenium driver of the system's Chromium (Debian: apt-get install chromium chromium-driver), or a skip
    that says what is missing; where NEMOTRON_REQUIRE_BROWSER=1 (.ci/run) a missing browser fails instead."""
    import os
    import shutil

    names = ("chromium", "chromium-browser", "google-chrome")
    browser = next((shutil.which(n) for n in names if shutil.which(n)), None)
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver
    except ImportError:
        webdriver = None
    missing = [what for what, found in (("chromium", browser), ("chromedriver", driver_path),
                                        ("selenium (pip install -e .[test])", webdriver)) if not found]
    if missing:
        reason = (f"no headless browser for the page tests: {', '.join(missing)} not installed "
                  "(apt-get install chromium chromium-driver)")
        if os.environ.get("NEMOTRON_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + "; NEMOTRON_REQUIRE_BROWSER=1 requires it")
        pytest.skip(reason)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1100,760"):
        options.add_argument(flag)
    # an explicit driver path: Selenium Manager would otherwise try to download one
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
