"""Reading the daemon's `/metrics` and `/api/v1/status` over HTTP (standard library)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from trainmon.top.view import Read, parse_read


class Unreadable(Exception):
    """The daemon did not answer, or answered something that is not its metrics and status."""


def read_daemon(url: str, timeout: float) -> Read:
    """One read of both endpoints.

    Raises:
        Unreadable: naming the URL and why.
    """
    base = url.rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=timeout) as answer:
            text = answer.read().decode()
        with urllib.request.urlopen(f"{base}/api/v1/status", timeout=timeout) as answer:
            status = json.loads(answer.read())
        return parse_read(text, status, time.time())
    except urllib.error.HTTPError as exc:
        raise Unreadable(f"{base}: HTTP {exc.code} {exc.reason} (is it a trainmon daemon? see --url)") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreadable(f"cannot reach the trainmon daemon at {base}: {reason} (start trainmon serve, "
                         "or give its address with --url)") from None
    except ValueError as exc:
        raise Unreadable(f"{base} did not answer as a trainmon daemon does ({exc})") from None
