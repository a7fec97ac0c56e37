"""Command line: serve | check | demo | version. The only module that configures logging."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from trainmon import __version__
from trainmon.errors import ConfigError
from trainmon.settings import Option, Settings, serve_options, settings_from, systemd_socket_fd

if TYPE_CHECKING:
    from trainmon.webconfig import WebConfig

DAEMON_MODULES = ("prometheus_client", "fastapi", "uvicorn", "psutil", "pynvml")


class OneLineParser(argparse.ArgumentParser):
    """Bad input gets one line and exit code 2, not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"trainmon: error: {message}\n")


def available_collectors() -> list[str]:
    from trainmon.collectors import AVAILABLE

    return list(AVAILABLE)


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    for opt in options:
        help_text = f"{opt.help} (env {opt.env_name}; default {opt.default!r})"
        if opt.is_switch:
            parser.add_argument(f"--{opt.flag}", action="store_const", const="true", default=None, help=help_text)
        else:
            parser.add_argument(f"--{opt.flag}", default=None, metavar=opt.flag.split("-")[-1].upper(),
                                help=help_text)


def raw_values(args: argparse.Namespace, options: Sequence[Option]) -> dict[str, str]:
    """Flag, else TRAINMON_* variable, else nothing (the option's default applies)."""
    values = {}
    for opt in options:
        given = getattr(args, opt.field_name)
        if given is None:
            given = os.environ.get(opt.env_name)
        if given is not None:
            values[opt.field_name] = given
    return values


def build_parser(options: Sequence[Option]) -> OneLineParser:
    parser = OneLineParser(prog="trainmon", description="GPU-cluster training monitor.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, description in (
        ("serve", "run the daemon"),
        ("check", "collect once, print what each collector found, exit 1 if one failed"),
        ("demo", "run the daemon on a simulated 8-GPU node with a simulated training job"),
    ):
        add_options(commands.add_parser(name, help=description, description=description), options)
    commands.add_parser("version", help="print the version")
    commands.add_parser("diagnose", help="what holds a training job back, from Prometheus (see diagnose --help)",
                        add_help=False)
    return parser


def missing_daemon_modules() -> list[str]:
    import importlib.util

    return [m for m in DAEMON_MODULES if importlib.util.find_spec(m) is None]


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["version"]:
        print(f"trainmon {__version__}")
        return 0
    if argv[:1] == ["diagnose"]:  # standard library only: no daemon dependencies needed
        from trainmon.diagnose import main as diagnose

        return diagnose(argv[1:])
    missing = missing_daemon_modules()
    if missing and argv[:1] != ["--help"]:
        print(f"trainmon: the daemon needs its dependencies, the [daemon] extra: pip install '.[daemon]' in a "
              f"trainmon checkout, not on the package index yet (missing: {', '.join(missing)})", file=sys.stderr)
        return 1
    options = serve_options(available_collectors())
    args = build_parser(options).parse_args(argv)
    values = raw_values(args, options)
    web = None
    try:
        settings = settings_from(values, options, **command_overrides(args.command, values))
        if settings.web_config is not None:
            from trainmon.webconfig import load_web_config

            web = load_web_config(settings.web_config)  # a broken file stops start-up before anything runs
    except ConfigError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if args.command == "check":
        return check(settings)
    # SIGHUP re-reads --web-config once the server runs; until then it must not kill the daemon either.
    signal.signal(signal.SIGHUP, lambda *_: None)
    if args.command == "demo":
        return demo(settings, web)
    from trainmon.daemon import serve

    return serve(settings, web)


def command_overrides(command: str, values: dict[str, str]) -> dict[str, object]:
    if command == "serve":
        return {"ingest_socket_fd": systemd_socket_fd(os.environ, os.getpid())}
    if command != "demo":
        return {}
    overrides: dict[str, object] = {"simulated": True}
    if "interval" not in values:
        overrides["interval"] = 1.0  # GPM needs two samples: SM activity shows after one interval
    if "ingest_socket" not in values:
        # A private socket, so the demo never takes the path a real daemon on this host uses.
        overrides["ingest_socket"] = os.path.join(tempfile.mkdtemp(prefix="trainmon-demo-"), "ingest.sock")
    return overrides


def check(settings: Settings) -> int:
    from trainmon.daemon import collect_once

    snapshot = collect_once(settings)
    for status in snapshot.statuses:
        print(f"{status.name:<12} {status.state.upper():<8} {status.duration_s * 1000:8.1f} ms"
              + (f"  {status.error}" if status.error else ""))
        for line in status.found:
            print(f"    {line}")
        for line in status.skipped:
            print(f"    skipped: {line}")
    failing = [s.name for s in snapshot.statuses if not s.ok]
    if failing:
        print(f"failing: {', '.join(failing)}")
        return 1
    return 0


def demo(settings: Settings, web: WebConfig | None) -> int:
    from trainmon.daemon import serve
    from trainmon.demo_job import start_simulated_job

    logging.getLogger(__name__).warning("SIMULATED node: trainmon demo serves made-up GPUs and a made-up job")
    job = start_simulated_job(settings)
    try:
        return serve(settings, web)
    finally:
        job.stop()
