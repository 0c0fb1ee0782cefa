"""Fixtures of the explorer's tests. The page's browser fixtures (``browser``: one headless chromium
per module; ``opened``: open a page and record its errors and requests) live in page_browser.py."""
from page_browser import browser, opened  # noqa: F401  (fixtures, found by name)
