"""A browser for $BROWSER in tests: ``python browser.py URL`` follows the URL's redirects (an
authorization server that approves at once sends it on to tether's loopback redirect)."""

import sys

import httpx

response = httpx.get(sys.argv[1], follow_redirects=True, timeout=30)
sys.exit(0 if response.status_code == 200 else 1)
