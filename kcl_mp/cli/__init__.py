"""``kcl-mp``: the command line.

    kcl-mp --properties app.properties            run a worker (as the Java MultiLangDaemon)
    kcl-mp app.properties                         the same, positional (as the kclpy helper)
    kcl-mp -p app.properties --embedded           on a local moto server, no AWS account
    kcl-mp leases -p app.properties [--json]      the lease table: per worker, per lease
    kcl-mp check-processor -- CMD ARGS            the multilang conformance kit, on any processor
    kcl-mp check-config -p app.properties         the pre-flight: properties, processor, AWS access
    kcl-mp --version

Accepts the Java daemon's spellings (``--properties-file``, ``-p``, a positional file,
``-l/--log-configuration`` which is ignored with a warning). Exit status: 0 after a
graceful stop (a SIGTERM or SIGINT during start-up included), 1 for a configuration error,
a start-up error (DynamoDB or Kinesis unreachable or refusing, no such stream or consumer:
the line says which) or a processor that cannot start, 2 for a command-line error, 70 for a
bug kcl-mp could not go on after (its traceback logged; the leases released and the pool
processes ended when it struck a running supervisor). Every traceback goes through logging.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from kcl_mp import __version__, logs
from kcl_mp.config import Config, load_config
from kcl_mp.config.load import parse_overrides
from kcl_mp.config.settings import StreamKind
from kcl_mp.errors import EXIT_CONFIG, EXIT_INTERNAL, EXIT_USAGE, ConfigError, KclMpError

log = logging.getLogger("kcl_mp.cli")

# The sub-commands, one line each for --help; each has its own --help with examples.
COMMANDS = (
    ("(none)", "run a worker, as the Java MultiLangDaemon: kcl-mp --properties app.properties"),
    ("leases", "the lease table, per worker and per lease: kcl-mp leases -p app.properties"),
    ("check-processor", "the multilang conformance kit on a processor: kcl-mp check-processor -- CMD ARGS"),
    ("check-config", "a host's pre-flight, nothing written: kcl-mp check-config -p app.properties"),
)
EXAMPLES = """\
examples:
  kcl-mp --properties app.properties
  kcl-mp -p app.properties --embedded --progress 2      # on a local moto server, no AWS account
  kcl-mp -p app.properties --metrics-port 9464 --metrics-address 0.0.0.0 --log-format json --set workerId=$HOSTNAME"""


def _parser() -> argparse.ArgumentParser:
    commands = "\n".join(f"  {name:<17} {line}" for name, line in COMMANDS)
    p = argparse.ArgumentParser(
        prog="kcl-mp",
        usage="kcl-mp [--properties FILE | FILE] [options]\n"
              "       kcl-mp leases --properties FILE [--json] [--watch [SECONDS]]\n"
              "       kcl-mp check-processor [options] -- COMMAND [ARGS...]\n"
              "       kcl-mp check-config --properties FILE [--set KEY=VALUE] [--endpoint URL]",
        description="A KCL MultiLangDaemon in Python: the same properties file, lease table and processors.\n\n"
                    f"commands:\n{commands}\n  'kcl-mp COMMAND --help' shows a command's options and examples.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"kcl-mp {__version__}")
    p.add_argument("file", nargs="?", help="the properties file (same as --properties)")
    p.add_argument("--properties", "--properties-file", "-p", dest="properties", metavar="FILE",
                   help="the MultiLangDaemon properties file")
    p.add_argument("-l", "--log-configuration", metavar="LOGBACK_XML",
                   help="accepted for compatibility with the Java daemon and ignored")
    p.add_argument("--log-level", default=os.environ.get("KCL_MP_LOG_LEVEL", "INFO"),
                   help="DEBUG, INFO, WARNING, ERROR (default: $KCL_MP_LOG_LEVEL or INFO)")
    p.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("KCL_MP_LOG_FORMAT", "text"),
                   help="text, or json: one object a line (default: $KCL_MP_LOG_FORMAT or text)")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics and /healthz on PORT (same as --set kclmp.metricsPort=PORT)")
    p.add_argument("--metrics-address", metavar="ADDRESS",
                   help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for a pod's probes; "
                        "kclmp.metricsAddress)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a properties key (repeatable)")
    p.add_argument("--progress", type=float, metavar="SECONDS",
                   help="print the live view (records/s per shard, last checkpoint) to stdout every SECONDS")
    g = p.add_argument_group("embedded local default (no AWS account)")
    g.add_argument("--embedded", action="store_true",
                   help="start a moto server on 127.0.0.1, point Kinesis and DynamoDB at it, create the stream")
    g.add_argument("--embedded-port", type=int, metavar="PORT", help="port for the embedded server (default: free)")
    g.add_argument("--embedded-shards", type=int, default=4, metavar="N",
                   help="shards of the stream the embedded mode creates when it is missing (default 4)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; the one place a kcl-mp error becomes an exit status (``fail``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["leases"], ["check-processor"], ["check-config"]):
        logs.setup(os.environ.get("KCL_MP_LOG_LEVEL", "WARNING"), "text")
        try:
            if argv[0] == "leases":
                from kcl_mp.cli import leases

                return leases.main(argv[1:])
            if argv[0] == "check-config":
                from kcl_mp.cli import check_config

                return check_config.main(argv[1:])
            from kcl_mp.cli import check_processor

            return check_processor.main(argv[1:])
        except KclMpError as exc:
            return fail(exc)
    args = _parser().parse_args(argv)
    logs.setup(args.log_level, args.log_format)
    _log_uncaught()
    path = args.properties or args.file
    if args.properties and args.file:
        log.warning("both --properties %s and %s given; using --properties", args.properties, args.file)
    if not path:
        print("kcl-mp: error: no properties file; use --properties FILE", file=sys.stderr)
        return EXIT_USAGE
    if args.log_configuration:
        log.warning("-l/--log-configuration %s ignored: kcl-mp logs with --log-level/--log-format",
                    args.log_configuration)
    try:
        return run(args, path)
    except KclMpError as exc:
        return fail(exc, json_logs=args.log_format == "json")
    except Exception:
        log.critical("kcl-mp failed unexpectedly; exiting with status %d", EXIT_INTERNAL, exc_info=True)
        return EXIT_INTERNAL


def _log_uncaught() -> None:
    """Tracebacks nobody caught (a thread's included) go through logging, so JSON logs stay
    JSON and redaction applies; forked pool processes inherit the hooks."""
    def thread_failed(hook: threading.ExceptHookArgs) -> None:
        if hook.exc_type is not SystemExit and hook.exc_value is not None:
            log.critical("thread %s failed", hook.thread.name if hook.thread else "?",
                         exc_info=(hook.exc_type, hook.exc_value, hook.exc_traceback))

    threading.excepthook = thread_failed
    sys.excepthook = lambda kind, value, trace: log.critical("kcl-mp failed", exc_info=(kind, value, trace))


def run(args: argparse.Namespace, path: str) -> int:
    """The daemon: load the configuration (on the embedded server if asked), check it can
    start, run the supervisor until it stops. Errors raise."""
    emulator = None
    endpoint: Path | None = None
    try:
        overrides = parse_overrides(args.set)
        if args.metrics_port is not None:
            overrides["kclmp.metricsPort"] = str(args.metrics_port)
        if args.metrics_address:
            overrides["kclmp.metricsAddress"] = args.metrics_address
        if args.embedded:
            from kcl_mp import embedded

            emulator = embedded.start_emulator(args.embedded_port)
            log.info("embedded moto server at %s (its log: %s)", emulator.url, emulator.log_path)
            overrides = {**embedded.embedded_overrides(emulator.url), **overrides}
        config = load_config(path, overrides=overrides)
        if emulator is not None:
            from kcl_mp.aws.clients import client as aws_client

            endpoint = embedded.endpoint_file(config.application_name)
            endpoint.write_text(emulator.url + "\n")
            log.info("its endpoint is in %s: kcl-mp leases -p %s --embedded reads it", endpoint, path)

            if config.stream_kind is StreamKind.DYNAMODB:
                config = embedded_tables(config, path, overrides, emulator.url, args.embedded_shards)
            else:
                for name in config.stream_names or (config.stream_name,):
                    if embedded.ensure_stream(aws_client("kinesis", config.kinesis), name, args.embedded_shards):
                        log.info("created stream %s with %d shards", name, args.embedded_shards)
        check_startable(config)
        logs.setup(args.log_level, args.log_format, config.worker_id)
        from kcl_mp.supervisor.loop import Supervisor

        return Supervisor(config, args.log_level, args.log_format, args.progress).run()
    finally:
        if emulator is not None:
            emulator.stop()
            if endpoint is not None:
                endpoint.unlink(missing_ok=True)


def embedded_tables(config: Config, path: str, overrides: dict[str, str], url: str, shards: int) -> Config:
    """``config`` with each of its tables created on the embedded emulator (with ``shards``) unless
    there, read through the stream the emulator gave it (it names its streams itself)."""
    from kcl_mp import embedded
    from kcl_mp.aws.clients import client as aws_client

    listed = {stream.key_name: stream.arn for stream in config.streams} or {config.stream_name: config.stream_arn}
    arns = {}
    for table, configured in listed.items():
        arns[table], created = embedded.ensure_table_stream(aws_client("dynamodb", config.dynamodb), url, table, shards)
        if created:
            log.info("created table %s with a stream of %d shards", table, shards)
        if arns[table] != configured:
            log.info("reading table %s's stream on the emulator: %s", table, arns[table])
    if list(arns.values()) == list(listed.values()):
        return config
    if config.stream_list.file:
        raise ConfigError(f"streamListFile {config.stream_list.file}: with --embedded, name the tables' streams in "
                          "streamArns (the emulator names its streams itself: the file's ARNs cannot be read there)")
    key = "streamArns" if config.streams else "streamArn"
    return load_config(path, overrides={**overrides, key: ",".join(arns.values())})


def fail(exc: KclMpError, json_logs: bool = False) -> int:
    """Print a kcl-mp error for a person (a JSON log line with --log-format json); the exit status."""
    kind = "configuration error" if isinstance(exc, ConfigError) else "error"
    if json_logs:
        log.error("%s: %s", kind, exc)
    else:
        print(f"kcl-mp: {kind}: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def check_startable(config: Config) -> None:
    """Refuse, before any lease is taken, what cannot run: a processor executable that is missing."""
    from kcl_mp.errors import ProcessorStartError
    from kcl_mp.multilang.command import resolve_command

    commands = [("executableName", config.processor.command)]
    own = {stream.name: stream.command for stream in (*config.streams, *config.stream_list.templates)}
    commands += [(f"stream.{name}.executableName", command) for name, command in own.items()  # listed later too
                 if command != config.processor.command]
    for key, command in commands:
        try:
            resolve_command(command, os.getcwd(), os.environ)
        except ProcessorStartError as exc:
            raise ConfigError(f"{config.source}: {key}: {exc}") from exc


if __name__ == "__main__":
    sys.exit(main())
