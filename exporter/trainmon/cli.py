"""Command line: serve | check | demo | diagnose | top | version. The only module that configures logging."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

from trainmon import __version__
from trainmon.errors import ConfigError
from trainmon.settings import Address, Option, Settings, command_options, settings_from, systemd_socket_fd

if TYPE_CHECKING:
    from trainmon.simulation.incidents import Plan
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


COMMANDS = (
    ("serve", "run the daemon"),
    ("check", "collect once, print what each collector found, exit 1 if one failed"),
    ("demo", "run the daemon on a simulated 8-GPU node with a simulated training job"),
)


def subcommand_options(command: str, available: Sequence[str]) -> tuple[Option, ...]:
    """Every flag of one subcommand: its `Settings` options and, for `demo`, the demo's own."""
    if command == "demo":
        from trainmon.demo.options import DEMO_OPTIONS

        return command_options(command, available) + DEMO_OPTIONS
    return command_options(command, available)


def build_parser(available: Sequence[str]) -> OneLineParser:
    parser = OneLineParser(prog="trainmon", description="GPU-cluster training monitor.")
    parser.add_argument("--version", action="version", version=f"trainmon {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, description in COMMANDS:
        add_options(commands.add_parser(name, help=description, description=description),
                    subcommand_options(name, available))
    commands.add_parser("version", help="print the version")
    commands.add_parser("diagnose", help="what holds a training job back, from Prometheus (see diagnose --help)",
                        add_help=False)
    commands.add_parser("top", help="a live terminal view of this node from its daemon (see top --help)",
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
    if argv[:1] in (["version"], ["--version"]):
        print(f"trainmon {__version__}")
        return 0
    if argv[:1] == ["diagnose"]:  # standard library only: no daemon dependencies needed
        from trainmon.diagnose import main as diagnose

        return diagnose(argv[1:])
    if argv[:1] == ["top"]:  # reads a running daemon over HTTP: none of its collectors are needed here
        from trainmon.top import main as top

        return top(argv[1:])
    missing = missing_daemon_modules()
    if missing and argv[:1] != ["--help"]:
        print(f"trainmon: the daemon needs its dependencies, the [daemon] extra: pip install '.[daemon]' in a "
              f"trainmon checkout, not on the package index yet (missing: {', '.join(missing)})", file=sys.stderr)
        return 1
    available = available_collectors()
    args = build_parser(available).parse_args(argv)
    values = raw_values(args, subcommand_options(args.command, available))
    web = None
    try:
        settings = settings_from(values, command_options(args.command, available), **command_overrides(args.command))
        plan = demo_plan(values) if args.command == "demo" else None
        if settings.web_config is not None:
            from trainmon.webconfig import load_web_config

            web = load_web_config(settings.web_config)  # a broken file stops start-up before anything runs
        if args.command != "check":
            require_bindable(settings.listen)
    except ConfigError as exc:
        print(f"trainmon: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if args.command == "check":
        return check(settings)
    # SIGHUP re-reads --web-config once the server runs; until then it must not kill the daemon either.
    signal.signal(signal.SIGHUP, lambda *_: None)
    if plan is not None:
        return demo(settings, web, plan)
    from trainmon.daemon import serve

    return serve(settings, web)


def command_overrides(command: str) -> dict[str, object]:
    if command == "serve":
        return {"ingest_socket_fd": systemd_socket_fd(os.environ, os.getpid())}
    if command == "check":
        return {"state_read_only": True}
    return {}


def require_bindable(listen: Address) -> None:
    """Fail start-up, before any collector runs, when the HTTP address cannot be bound.

    Raises:
        ConfigError: naming `--listen` and the kernel's reason.
    """
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(listen.host, listen.port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
            probe.bind(sockaddr)
    except OSError as exc:
        raise ConfigError("listen", str(listen), f"cannot bind it ({exc.strerror or exc})") from None


def ingest_socket_answer(path: str) -> str:
    """Whether a daemon is bound at `path`: `connect` asks the kernel and sends nothing."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except OSError as exc:
            return f"no daemon answers ingest socket {path} ({exc.strerror or exc}); start trainmon serve"
    return f"ingest socket {path} is answered by a running daemon"


def check(settings: Settings) -> int:
    """One cycle of the hardware collectors; the training collector's socket is probed, never bound."""
    from trainmon.daemon import collect_once

    # The table is the report: the daemon's log line of each collector's state would say it all a second time.
    for name in ("trainmon.scheduler", "trainmon.daemon"):
        logging.getLogger(name).setLevel(logging.ERROR)
    hardware = tuple(c for c in settings.collectors if c != "training")
    snapshot = collect_once(replace(settings, collectors=hardware))
    for status in snapshot.statuses:
        print(f"{status.name:<12} {status.state.upper():<8} {status.duration_s * 1000:8.1f} ms"
              + (f"  {status.error}" if status.error else ""))
        for line in status.found:
            print(f"    {line}")
        for line in status.skipped:
            print(f"    skipped: {line}")
    if "training" in settings.collectors and settings.ingest_socket:
        print(f"{'training':<12} {'PROBED':<8}\n    {ingest_socket_answer(settings.ingest_socket)}")
    failing = [s.name for s in snapshot.statuses if not s.ok]
    if failing:
        print(f"failing: {', '.join(failing)}")
        return 1
    return 0


def demo_plan(values: dict[str, str]) -> Plan:
    from trainmon.demo.options import plan_from

    return plan_from(values)


def demo(settings: Settings, web: WebConfig | None, plan: Plan) -> int:
    from trainmon.demo.runner import run_demo

    return run_demo(settings, web, plan)
